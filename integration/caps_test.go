//go:build linux

package integration

import (
	"strings"
	"testing"
)

// TestCapAdd: a granted capability is held (and only it), reported, and
// usable inside the sandbox's own namespaces; none is held by default.
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

// TestCapAddPtraceCannotReachInit: CAP_SYS_PTRACE granted to the command
// works on the command's own processes but not on PID 1, the agentrun init:
// init's memory belongs to the host's user namespace, not the sandbox's.
func TestCapAddPtraceCannotReachInit(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	flags := []string{"--cap-add", "CAP_SYS_PTRACE"}
	mustBlock(t, attack(t, ws, flags, "ptrace", "1"), "ptrace init with CAP_SYS_PTRACE")
	mustBlock(t, attack(t, ws, flags, "vmread", "1"), "read init's memory with CAP_SYS_PTRACE")
	mustBlock(t, attack(t, ws, flags, "open", "/proc/1/exe", "r"), "open /proc/1/exe with CAP_SYS_PTRACE")
	mustBlock(t, attack(t, ws, flags, "fd-reopen", "/proc/1/fd"), "reopen init's fds with CAP_SYS_PTRACE")
	// Positive control: the grant works on the command's own child.
	r := spawn(t, spawnCfg{ws: ws, flags: flags}, "/bin/sh", "-c", "sleep 5 & /workspace/attacker ptrace $!; kill $!")
	if v, d := r.verdict(); v != "ESCAPED" {
		t.Errorf("CAP_SYS_PTRACE must allow tracing the command's own child, got %s %s\n%s", v, d, r)
	}
}
