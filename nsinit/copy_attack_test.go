//go:build linux && cgo

package nsinit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/mounts"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// copySource writes a file for a copy entry, owned by the host id the
// sandbox user maps to (so the init could read it whatever its mode).
func copySource(t *testing.T, spec *specs.Spec, content string, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agentrun-copy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, mode); err != nil {
		t.Fatal(err)
	}
	host := int(spec.Linux.UIDMappings[0].HostID)
	if err := os.Chown(src, host, int(spec.Linux.GIDMappings[0].HostID)); err != nil {
		t.Fatal(err)
	}
	return src
}

// TestCopyEntries checks that the init copies a world-readable file into
// the tmpfs root, and refuses one that not everyone may read, since the
// copy belongs to the sandbox user.
func TestCopyEntries(t *testing.T) {
	skipWithoutUserns(t)
	spec := testSpec(t, "/bin/sh", "-c", "cat /etc/copied; ls -ln /etc/copied")
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/etc/copied", Type: mounts.TypeCopy, Source: copySource(t, spec, "copied-content\n", 0o644)})
	r := runSpec(t, spec)
	if err := wantExit(0, 0)(r); err != nil || !strings.HasPrefix(r.stdout, "copied-content\n-rw-r--r-- ") {
		t.Errorf("a world-readable copy: %v, stdout %q stderr %q", err, r.stdout, r.stderr)
	}

	spec = testSpec(t, "/bin/true")
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/etc/copied", Type: mounts.TypeCopy, Source: copySource(t, spec, "secret\n", 0o640)})
	r = runSpec(t, spec)
	var se *StepError
	if !errors.As(r.err, &se) || se.Step != "mount /etc/copied" || !strings.Contains(se.Msg, "not readable by all") {
		t.Errorf("a copy source only its owner and group may read: want a step error for mount /etc/copied, got %v (exit %+v)", r.err, r.exit)
	}
}
