//go:build unix

package statedir

import (
	"errors"
	"os"
	"path/filepath"
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
