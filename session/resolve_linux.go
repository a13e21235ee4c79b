//go:build linux

package session

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentrun/agentrun/mounts"
)

// PathError is a path the session's policy does not let the caller reach
// on the host (outside every host bind, through a symlink or ".." that
// leaves its bind, or a write to a read-only bind). Clients map it to
// their "policy" error kind.
type PathError struct {
	Path   string // the sandbox path as the caller gave it
	Reason string
}

func (e *PathError) Error() string {
	return "agentrun: path " + strconv.Quote(e.Path) + ": " + e.Reason
}

// Resolve maps p, a path in the sandbox, to the host path that holds it,
// so that the caller can do the file I/O itself. A relative p is taken
// from cwd, an absolute sandbox path; "" means cwd itself. With write set
// it also refuses paths that are read-only in the sandbox.
//
// The sandbox reaches host files only through the bind mounts of spec
// (Type "bind", or Options with "bind" or "rbind"): the mount that covers
// the cleaned path is, as in the kernel, the last one in spec.Mounts whose
// destination is the path or one of its parent directories (for specs
// that list parents before children, the longest such prefix). A path
// covered by any other mount, a device or a masked path is refused with a
// *PathError, as is one that no mount covers.
//
// Within the bind, symlinks are followed beneath its host source only
// (openat2 with RESOLVE_BENEATH): a symlink or ".." that leaves it is a
// *PathError. Where a symlink lands on a place that another mount covers
// in the sandbox (a read-only bind, a tmpfs over part of the workspace),
// the path is resolved again from there, so a symlink cannot reach what
// that mount hides or write what it makes read-only. A path that does not
// exist yet resolves through its longest existing parent, with the rest
// appended; a dangling symlink on the way is refused, since what it will
// point to is not known.
//
// The result is an absolute host path without symlinks, naming the file
// the sandbox sees at p at the time of the call. It is a path, not a
// handle: a process in the sandbox that swaps a directory on it for a
// symlink afterwards can redirect the caller's later open of the path to
// any file the caller can reach: the symlink is followed on the host, with
// the caller's rights. Callers that must not be redirected open the
// result with openat2 and RESOLVE_NO_SYMLINKS (or component by component
// with O_NOFOLLOW), never with a plain open.
//
// Resolve needs openat2 (Linux 5.6); without it, it fails closed.
func Resolve(spec *specs.Spec, cwd, p string, write bool) (string, error) {
	sp := p
	if !path.IsAbs(p) {
		if !path.IsAbs(cwd) {
			return "", fmt.Errorf("agentrun: resolve %q: cwd %q is not an absolute sandbox path", p, cwd)
		}
		sp = path.Join(cwd, p)
	}
	if strings.IndexByte(sp, 0) >= 0 {
		return "", &PathError{Path: p, Reason: "contains a NUL byte"}
	}
	if spec == nil {
		return "", fmt.Errorf("agentrun: resolve %q: no spec", p)
	}
	sp = path.Clean(sp)
	lexical := sp
	// Each round resolves within one bind and ends on the mount that
	// covers the real path. A new round's mount comes later in
	// spec.Mounts than the previous one (both cover that path), so the
	// rounds are bounded; a concurrent rename costs a few more.
	retries := 0
	for round := 0; round <= len(spec.Mounts); {
		i, what := resolveMatch(spec, sp)
		if i < 0 {
			reason := "not on a host bind"
			switch {
			case what != "" && sp == lexical:
				reason += " (it is " + what + " in the sandbox)"
			case what != "":
				reason += " (it leads to " + sp + ", " + what + " in the sandbox)"
			}
			return "", &PathError{Path: p, Reason: reason}
		}
		m := &spec.Mounts[i]
		dest := path.Clean("/" + m.Destination)
		host, rel, err := resolveIn(m, p, strings.TrimPrefix(strings.TrimPrefix(sp, dest), "/"))
		if errors.Is(err, errResolveMoved) && retries < 3 {
			retries++
			continue
		}
		if err != nil {
			return "", err
		}
		real := path.Join(dest, rel)
		if j, _ := resolveMatch(spec, real); j != i {
			sp = real
			round++
			continue
		}
		if write && resolveReadOnly(spec, m, real) {
			return "", &PathError{Path: p, Reason: "read-only in the sandbox"}
		}
		return host, nil
	}
	return "", fmt.Errorf("agentrun: resolve %q: too many mounts crossed", p)
}

// errResolveMoved means a directory on the path was renamed or replaced
// while it was being resolved; Resolve tries again.
var errResolveMoved = errors.New("a directory on the path changed while it was resolved")

// resolveMatch returns the index in spec.Mounts of the bind that holds
// sp in the sandbox or, with -1, what holds it instead ("" for nothing).
func resolveMatch(spec *specs.Spec, sp string) (int, string) {
	idx, what := -1, ""
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if !resolveUnder(sp, path.Clean("/"+m.Destination)) {
			continue
		}
		// A later mount hides an earlier one at or beneath its
		// destination: it is mounted on top.
		idx, what = i, ""
		if !resolveIsBind(m) {
			idx, what = -1, "on "+resolveDescribe(m.Type)
		}
	}
	// The init attaches devices and masks paths after the mounts.
	if spec.Linux != nil {
		for _, d := range spec.Linux.Devices {
			if resolveUnder(sp, path.Clean("/"+d.Path)) {
				idx, what = -1, "a device node"
			}
		}
		for _, mp := range spec.Linux.MaskedPaths {
			if resolveUnder(sp, path.Clean("/"+mp)) {
				idx, what = -1, "masked"
			}
		}
	}
	return idx, what
}

func resolveDescribe(typ string) string {
	switch typ {
	case "":
		return "a mount"
	case mounts.TypeSymlink:
		return "a symlink the runtime made"
	case mounts.TypeCopy:
		return "a copy made at the start"
	case mounts.TypeRootTemplate:
		return "the root template"
	}
	return "a " + typ
}

// resolveUnder reports whether p is dir or lies in it, by whole path
// components (so /workspace2 is not under /workspace).
func resolveUnder(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

func resolveIsBind(m *specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// resolveReadOnly reports whether the sandbox sees sp, which m holds, as
// read-only: through m's options, or a read-only path stacked over it.
func resolveReadOnly(spec *specs.Spec, m *specs.Mount, sp string) bool {
	if slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "rro") {
		return true
	}
	if spec.Linux != nil {
		for _, r := range spec.Linux.ReadonlyPaths {
			if resolveUnder(sp, path.Clean("/"+r)) {
				return true
			}
		}
	}
	return false
}

// resolveIn resolves rel (clean, relative, without "..") beneath the host
// source of the bind m. It returns the host path and its real path
// relative to the source, where symlinks may have taken it. p is the
// caller's path, for errors.
func resolveIn(m *specs.Mount, p, rel string) (string, string, error) {
	if !path.IsAbs(m.Source) {
		return "", "", fmt.Errorf("agentrun: resolve %q: bind source %q is not absolute", p, m.Source)
	}
	// The init opens sources with RESOLVE_NO_SYMLINKS too, so a symlink
	// here was swapped in after the start, possibly from inside the
	// sandbox through another bind.
	root, err := resolveOpen(unix.AT_FDCWD, m.Source, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if errors.Is(err, unix.ELOOP) {
		return "", "", &PathError{Path: p, Reason: "the source of its bind now holds a symlink"}
	}
	if err != nil {
		return "", "", resolveWrap(p, "open bind source "+m.Source, err)
	}
	defer unix.Close(root)
	rootHost, err := resolveFDPath(root)
	if err != nil {
		return "", "", resolveWrap(p, "bind source "+m.Source, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return "", "", resolveWrap(p, "bind source "+m.Source, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// A bind of a file maps its destination alone.
		if rel != "" {
			return "", "", resolveWrap(p, "bind of the file "+m.Source, unix.ENOTDIR)
		}
		return rootHost, "", nil
	}
	if rel == "" {
		return rootHost, "", nil
	}
	// Not RESOLVE_NO_XDEV for an rbind: the sandbox sees the host mounts
	// beneath the source too. A plain bind carries none of them.
	how := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS)
	recursive := slices.Contains(m.Options, "rbind")
	if !recursive {
		how |= unix.RESOLVE_NO_XDEV
	}
	comps := strings.Split(rel, "/")
	// Shorten the path until it exists: a new file, or a chain of new
	// directories, is appended to its longest existing parent.
	k, fd := len(comps), -1
	for ; k > 0; k-- {
		fd, err = resolveOpen(root, strings.Join(comps[:k], "/"), how)
		if !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	switch {
	case k == 0:
		fd, err = unix.Dup(root)
	case errors.Is(err, unix.EXDEV):
		reason := "escapes its bind"
		if !recursive {
			fd2, err2 := resolveOpen(root, strings.Join(comps[:k], "/"), how&^unix.RESOLVE_NO_XDEV)
			if err2 == nil {
				unix.Close(fd2)
			}
			if !errors.Is(err2, unix.EXDEV) {
				reason = "crosses a host mount point that its bind (not rbind) does not show"
			}
		}
		return "", "", &PathError{Path: p, Reason: reason}
	case errors.Is(err, unix.ELOOP):
		return "", "", resolveWrap(p, "too many symlinks, or a /proc magic link", err)
	}
	if err != nil {
		return "", "", resolveWrap(p, "open", err)
	}
	defer unix.Close(fd)
	host, err := resolveFDPath(fd)
	if err != nil {
		return "", "", resolveWrap(p, "resolve", err)
	}
	real, ok := resolveRel(rootHost, host)
	if !ok {
		return "", "", resolveWrap(p, "resolve", errResolveMoved)
	}
	if k == len(comps) {
		return host, real, nil
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return "", "", resolveWrap(p, "stat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", "", resolveWrap(p, host, unix.ENOTDIR)
	}
	// The first missing name must be missing indeed: a dangling symlink
	// there is what made the longer paths fail, and it could point
	// anywhere once its target appears.
	err = unix.Fstatat(fd, comps[k], &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return "", "", &PathError{Path: p, Reason: "leads through a dangling symlink"}
	case err == nil:
		return "", "", resolveWrap(p, "resolve", errResolveMoved)
	case !errors.Is(err, unix.ENOENT):
		return "", "", resolveWrap(p, "stat", err)
	}
	rest := path.Join(comps[k:]...)
	return path.Join(host, rest), path.Join(real, rest), nil
}

// resolveOpen is openat2 for an O_PATH descriptor, retried on EAGAIN,
// which RESOLVE_BENEATH returns when a rename or mount raced a "..".
func resolveOpen(dirfd int, name string, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(dirfd, name, &how)
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// resolveFDPath returns the host path of fd, checked to name fd's file
// with no symlink in it: the kernel's name for a file removed since is
// "PATH (deleted)", which the sandbox could create as a symlink.
func resolveFDPath(fd int) (string, error) {
	host, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(host, "/") {
		return "", fmt.Errorf("%q is not a path in this mount namespace", host)
	}
	check, err := resolveOpen(unix.AT_FDCWD, host, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return "", errResolveMoved
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(check)
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return "", err
	}
	if err := unix.Fstat(check, &b); err != nil {
		return "", err
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return "", errResolveMoved
	}
	return host, nil
}

// resolveRel returns host relative to root, both real host paths.
func resolveRel(root, host string) (string, bool) {
	switch {
	case host == root:
		return "", true
	case root == "/":
		return host[1:], true
	case strings.HasPrefix(host, root+"/"):
		return host[len(root)+1:], true
	}
	return "", false
}

func resolveWrap(p, what string, err error) error {
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("agentrun: resolve %q: the kernel lacks openat2 (Linux 5.6 or later), so paths cannot be resolved safely: %w", p, err)
	}
	return fmt.Errorf("agentrun: resolve %q: %s: %w", p, what, err)
}
