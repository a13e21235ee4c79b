//go:build unix

package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func TestEnsureAndPrivate(t *testing.T) {
	uid := os.Geteuid()
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	if err := Ensure(dir, uid); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v, want 0700", fi.Mode().Perm())
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := Private(open, uid); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("world-writable dir accepted: %v", err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := Private(link, uid); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("symlink accepted: %v", err)
	}
	if err := Private(dir, uid+1); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("foreign owner accepted: %v", err)
	}
}

func TestRoot(t *testing.T) {
	if Root(0) != "/run/agentrun" {
		t.Errorf("root: %s", Root(0))
	}
	t.Setenv("XDG_RUNTIME_DIR", "/nonexistent")
	t.Setenv("TMPDIR", "/tmpx")
	if got := Root(1234); got != "/tmpx/agentrun-1234" {
		t.Errorf("fallback: %s", got)
	}
}

func TestCandidates(t *testing.T) {
	if got := Candidates(0); !slices.Equal(got, []string{"/run/agentrun", "/run/agentrun-templates"}) {
		t.Errorf("root: %q", got)
	}
	xdg := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	t.Setenv("TMPDIR", "/var/tmpx")
	got := Candidates(os.Geteuid())
	if os.Geteuid() == 0 {
		return
	}
	id := strconv.Itoa(os.Geteuid())
	// The selected root first, then every other one, whatever this
	// environment selects.
	for _, want := range []string{xdg + "/agentrun", "/run/user/" + id + "/agentrun", "/var/tmpx/agentrun-" + id, "/tmp/agentrun-" + id} {
		if !slices.Contains(got, want) {
			t.Errorf("candidates %q lack %s", got, want)
		}
	}
	if got[0] != Root(os.Geteuid()) {
		t.Errorf("candidates %q do not start with the root %s", got, Root(os.Geteuid()))
	}
	// A relative $TMPDIR is no root: it would be under the current
	// directory.
	t.Setenv("TMPDIR", "tmp")
	t.Setenv("XDG_RUNTIME_DIR", "")
	for _, c := range Candidates(os.Geteuid()) {
		if !filepath.IsAbs(c) {
			t.Errorf("relative candidate %q", c)
		}
	}
	if r := Root(os.Geteuid()); r != "/tmp/agentrun-"+id {
		t.Errorf("root with a relative TMPDIR: %s", r)
	}
}
