//go:build linux

package integration

import (
	"strings"
	"testing"
)

// TestCapAdd: a granted capability is held (and only it), reported, and
// usable inside the sandbox's own namespaces; none is held by default. The
// suite runs it against both inits.
func TestCapAdd(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	script := `grep -E '^Cap(Eff|Bnd|Amb)' /proc/self/status | tr -d '\t\n'; echo`
	r, res := spawnWithResult(t, ws, []string{"--cap-add", "CAP_NET_RAW"}, "/bin/sh", "-c", script)
	want := "CapEff:0000000000002000CapBnd:0000000000002000CapAmb:0000000000002000"
	if r.code != 0 || strings.TrimSpace(r.stdout) != want {
		t.Fatalf("want exactly CAP_NET_RAW (bit 13) in effective, bounding and ambient, got %q\n%s", r.stdout, r)
	}
	if len(res.Capabilities) != 1 || res.Capabilities[0] != "CAP_NET_RAW" {
		t.Errorf("result capabilities %v", res.Capabilities)
	}
	raw := `python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1); print("raw ok")'`
	if r := spawn(t, spawnCfg{ws: ws, flags: []string{"--cap-add", "net_raw"}}, "/bin/sh", "-c", raw); !strings.Contains(r.stdout, "raw ok") {
		t.Errorf("CAP_NET_RAW must allow a raw socket in the sandbox's network namespace\n%s", r)
	}
	if r := spawn(t, spawnCfg{ws: ws}, "/bin/sh", "-c", raw); strings.Contains(r.stdout, "raw ok") {
		t.Errorf("without --cap-add a raw socket must fail\n%s", r)
	}
	if r := spawn(t, spawnCfg{ws: ws, flags: []string{"--cap-add", "CAP_FLY"}}, "/bin/true"); r.code != 125 {
		t.Errorf("unknown capability must be refused with 125\n%s", r)
	}
}
