// Package statedir owns the location of agentrun's per-user runtime state
// (cgroup records, compiled seccomp programs, root templates and their
// locks, the prestart plan images and express records) and the checks that
// make it safe to trust: a real directory, owned by the caller, writable by
// no one else.
package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// Root is agentrun's state root for euid: /run/agentrun for root,
// $XDG_RUNTIME_DIR/agentrun when that is a private directory, else
// $TMPDIR/agentrun-UID.
func Root(euid int) string {
	if euid == 0 {
		return "/run/agentrun"
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) && Private(x, euid) == nil {
		return filepath.Join(x, "agentrun")
	}
	return filepath.Join(tempDir(), "agentrun-"+strconv.Itoa(euid))
}

// tempDir is os.TempDir when that is absolute: a relative $TMPDIR would put
// the state under the current directory, a spawn's default workspace.
func tempDir() string {
	if t := os.TempDir(); filepath.IsAbs(t) {
		return t
	}
	return "/tmp"
}

// Candidates are every state root agentrun may use for euid, whichever
// this process's environment selects: another session of the same user
// (with or without $XDG_RUNTIME_DIR, another $TMPDIR) may use another,
// and trusts what it finds there all the same. Root's templates are
// included (Root(0)+"-templates").
func Candidates(euid int) []string {
	if euid == 0 {
		return []string{"/run/agentrun", "/run/agentrun-templates"}
	}
	id := strconv.Itoa(euid)
	out := []string{Root(euid)}
	add := func(p string) {
		if filepath.IsAbs(p) && !slices.Contains(out, filepath.Clean(p)) {
			out = append(out, filepath.Clean(p))
		}
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		add(filepath.Join(x, "agentrun"))
	}
	add(filepath.Join("/run/user", id, "agentrun"))
	add(filepath.Join(tempDir(), "agentrun-"+id))
	add(filepath.Join("/tmp", "agentrun-"+id))
	return out
}

// Ensure creates dir (mode 0700, parents included) and checks that it and
// its parent inside the state root are private to euid. In a shared /tmp
// anyone could have created the directory first; what agentrun reads from
// there steers what it kills or which filter it loads.
func Ensure(dir string, euid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("statedir: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if err := Private(d, euid); err != nil {
			return err
		}
		if d == Root(euid) || filepath.Dir(d) == d || !Within(d, Root(euid)) {
			return nil
		}
	}
}

// Within reports whether p is root or lies below it (both clean and
// absolute).
func Within(p, root string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../")
}

// ErrNotPrivate marks a state path that others could have written.
var ErrNotPrivate = errors.New("not private to the caller")

// Private checks that path is not a symlink, is owned by uid and is not
// writable by group or others.
func Private(path string, uid int) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("statedir: %w", err)
	}
	owner, ok := ownerOf(fi)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("statedir: %s is a symlink: %w", path, ErrNotPrivate)
	case !ok || owner != uid:
		return fmt.Errorf("statedir: %s is owned by uid %d, not %d: %w", path, owner, uid, ErrNotPrivate)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("statedir: %s has mode %#o, writable by others: %w", path, fi.Mode().Perm(), ErrNotPrivate)
	}
	return nil
}
