//go:build linux

package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// resolveTree is a host layout for the tests: base holds ws (the
// workspace), ws2, data, outside (bound nowhere) and a regular file.
type resolveTree struct{ base, ws, ws2, data, outside, file string }

func resolveNewTree(t *testing.T) resolveTree {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr := resolveTree{
		base: base, ws: filepath.Join(base, "ws"), ws2: filepath.Join(base, "ws2"),
		data: filepath.Join(base, "data"), outside: filepath.Join(base, "outside"),
		file: filepath.Join(base, "hosts"),
	}
	for _, d := range []string{"ws/a", "ws/.git", "ws/secret", "ws2", "data/out", "outside"} {
		resolveMkdir(t, filepath.Join(base, d))
	}
	for _, f := range []string{"ws/a/b.txt", "ws/.git/config", "ws/secret/key", "ws2/f", "data/f", "outside/secret", "hosts"} {
		if err := os.WriteFile(filepath.Join(base, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

func resolveMkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func resolveSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func resolveBind(src, dest string, opts ...string) specs.Mount {
	return specs.Mount{Type: "bind", Source: src, Destination: dest, Options: append([]string{"rbind"}, opts...)}
}

func resolveSpec(ms ...specs.Mount) *specs.Spec {
	return &specs.Spec{Mounts: ms, Linux: &specs.Linux{}}
}

// resolveWant checks that Resolve maps p to want.
func resolveWant(t *testing.T, spec *specs.Spec, cwd, p string, write bool, want string) {
	t.Helper()
	got, err := Resolve(spec, cwd, p, write)
	if err != nil {
		t.Errorf("Resolve(%q, %q, write=%v): %v, want %s", cwd, p, write, err, want)
		return
	}
	if got != want {
		t.Errorf("Resolve(%q, %q, write=%v) = %s, want %s", cwd, p, write, got, want)
	}
}

// resolveRefused checks that Resolve refuses p with a *PathError whose
// reason holds reason: other errors mean a different check fired.
func resolveRefused(t *testing.T, spec *specs.Spec, cwd, p string, write bool, reason string) {
	t.Helper()
	got, err := Resolve(spec, cwd, p, write)
	var pe *PathError
	if !errors.As(err, &pe) {
		t.Errorf("Resolve(%q, %q, write=%v) = %q, %v; want a *PathError (%s)", cwd, p, write, got, err, reason)
		return
	}
	if pe.Path != p || !strings.Contains(pe.Reason, reason) {
		t.Errorf("Resolve(%q, %q, write=%v): %v; want path %q and reason %q", cwd, p, write, err, p, reason)
	}
	if !strings.HasPrefix(err.Error(), "agentrun: path ") {
		t.Errorf("Error() = %q", err.Error())
	}
}

func TestResolveRelativeAndAbsolute(t *testing.T) {
	tr := resolveNewTree(t)
	spec := resolveSpec(resolveBind(tr.ws, "/workspace"))
	want := filepath.Join(tr.ws, "a/b.txt")
	resolveWant(t, spec, "/", "/workspace/a/b.txt", false, want)
	resolveWant(t, spec, "/workspace/a", "b.txt", true, want)
	resolveWant(t, spec, "/workspace/a", "./../a//b.txt", false, want)
	resolveWant(t, spec, "/workspace/a", "/workspace/a/b.txt", false, want)
	resolveWant(t, spec, "/workspace/a", "", false, filepath.Join(tr.ws, "a"))
	resolveWant(t, spec, "/", "/workspace", false, tr.ws)
	if _, err := Resolve(spec, "workspace", "b.txt", false); err == nil {
		t.Error("a relative cwd was accepted")
	}
}

func TestResolveLongestPrefix(t *testing.T) {
	tr := resolveNewTree(t)
	spec := resolveSpec(
		resolveBind(tr.ws, "/workspace"),
		resolveBind(tr.data, "/workspace/data"),
		resolveBind(tr.ws2, "/workspace2"),
	)
	resolveWant(t, spec, "/", "/workspace/data/f", false, filepath.Join(tr.data, "f"))
	resolveWant(t, spec, "/", "/workspace/a/b.txt", false, filepath.Join(tr.ws, "a/b.txt"))
	resolveWant(t, spec, "/", "/workspace2/f", false, filepath.Join(tr.ws2, "f"))

	// By whole components: /workspace does not cover /workspace2.
	only := resolveSpec(resolveBind(tr.ws, "/workspace"))
	resolveRefused(t, only, "/", "/workspace2/f", false, "not on a host bind")
	resolveRefused(t, only, "/", "/etc/passwd", false, "not on a host bind")
	resolveRefused(t, only, "/", "/", false, "not on a host bind")
}

func TestResolveMountOrder(t *testing.T) {
	tr := resolveNewTree(t)
	// The later of two binds at one destination wins.
	spec := resolveSpec(resolveBind(tr.ws, "/w"), resolveBind(tr.ws2, "/w"))
	resolveWant(t, spec, "/", "/w/f", false, filepath.Join(tr.ws2, "f"))
	// A later bind at a shorter destination is mounted over an earlier,
	// deeper one and hides it, as in the kernel.
	spec = resolveSpec(resolveBind(tr.data, "/w/a"), resolveBind(tr.ws, "/w", "ro"))
	resolveWant(t, spec, "/", "/w/a/b.txt", false, filepath.Join(tr.ws, "a/b.txt"))
	resolveRefused(t, spec, "/", "/w/a/f", true, "read-only")
}

func TestResolveNotABind(t *testing.T) {
	tr := resolveNewTree(t)
	spec := resolveSpec(
		resolveBind(tr.ws, "/workspace"),
		specs.Mount{Type: "tmpfs", Source: "tmpfs", Destination: "/tmp"},
		specs.Mount{Type: "proc", Source: "proc", Destination: "/proc"},
		// Hides ws/secret, which exists on the host.
		specs.Mount{Type: "tmpfs", Source: "tmpfs", Destination: "/workspace/secret"},
	)
	spec.Linux.MaskedPaths = []string{"/workspace/.git/config"}
	spec.Linux.Devices = []specs.LinuxDevice{{Path: "/workspace/a/b.txt"}}
	resolveRefused(t, spec, "/", "/tmp/x", true, "(it is on a tmpfs in the sandbox)")
	resolveRefused(t, spec, "/", "/proc/self/root", false, "on a proc")
	resolveRefused(t, spec, "/", "/workspace/secret/key", false, "on a tmpfs")
	resolveRefused(t, spec, "/workspace", "secret", false, "on a tmpfs")
	resolveRefused(t, spec, "/", "/workspace/.git/config", false, "masked")
	resolveRefused(t, spec, "/", "/workspace/a/b.txt", false, "device node")
	// A symlink does not reach what the tmpfs hides either.
	resolveSymlink(t, "secret", filepath.Join(tr.ws, "s"))
	resolveRefused(t, spec, "/", "/workspace/s/key", false, "leads to /workspace/secret/key, on a tmpfs")
	resolveWant(t, spec, "/", "/workspace/a", false, filepath.Join(tr.ws, "a"))
}

func TestResolveReadOnly(t *testing.T) {
	tr := resolveNewTree(t)
	// A read-only bind nested in a read-write one (the .git pattern).
	spec := resolveSpec(resolveBind(tr.ws, "/workspace", "rw"), resolveBind(filepath.Join(tr.ws, ".git"), "/workspace/.git", "ro"))
	resolveRefused(t, spec, "/", "/workspace/.git/config", true, "read-only in the sandbox")
	resolveRefused(t, spec, "/", "/workspace/.git/new", true, "read-only in the sandbox")
	resolveWant(t, spec, "/", "/workspace/.git/config", false, filepath.Join(tr.ws, ".git/config"))
	resolveWant(t, spec, "/", "/workspace/a/b.txt", true, filepath.Join(tr.ws, "a/b.txt"))
	// A symlink in the read-write bind to the read-only one: in the
	// sandbox it lands on the read-only mount.
	resolveSymlink(t, ".git", filepath.Join(tr.ws, "g"))
	resolveRefused(t, spec, "/", "/workspace/g/config", true, "read-only in the sandbox")
	resolveWant(t, spec, "/", "/workspace/g/config", false, filepath.Join(tr.ws, ".git/config"))

	// A read-write bind nested in a read-only one.
	spec = resolveSpec(resolveBind(tr.data, "/data", "ro"), resolveBind(filepath.Join(tr.data, "out"), "/data/out"))
	resolveWant(t, spec, "/", "/data/out/new", true, filepath.Join(tr.data, "out/new"))
	resolveRefused(t, spec, "/", "/data/f", true, "read-only in the sandbox")
	resolveWant(t, spec, "/", "/data/f", false, filepath.Join(tr.data, "f"))
	// And through a symlink from the read-only one into it.
	resolveSymlink(t, "out", filepath.Join(tr.data, "o"))
	resolveWant(t, spec, "/", "/data/o/new", true, filepath.Join(tr.data, "out/new"))

	// A read-only path stacked over a read-write bind.
	spec = resolveSpec(resolveBind(tr.ws, "/workspace"))
	spec.Linux.ReadonlyPaths = []string{"/workspace/a"}
	resolveRefused(t, spec, "/", "/workspace/a/b.txt", true, "read-only in the sandbox")
	resolveWant(t, spec, "/", "/workspace/a/b.txt", false, filepath.Join(tr.ws, "a/b.txt"))
}

func TestResolveSymlinks(t *testing.T) {
	tr := resolveNewTree(t)
	spec := resolveSpec(resolveBind(tr.ws, "/workspace"))
	resolveSymlink(t, "a/b.txt", filepath.Join(tr.ws, "sib"))
	resolveSymlink(t, "a", filepath.Join(tr.ws, "dir"))
	resolveSymlink(t, "../a/b.txt", filepath.Join(tr.ws, "a/up"))
	resolveSymlink(t, "/etc/passwd", filepath.Join(tr.ws, "passwd"))
	resolveSymlink(t, "../outside", filepath.Join(tr.ws, "out"))
	resolveSymlink(t, "a/../../outside/secret", filepath.Join(tr.ws, "deep"))
	// Absolute in the sandbox's terms, yet refused: see the report.
	resolveSymlink(t, "/workspace/a/b.txt", filepath.Join(tr.ws, "abs"))

	want := filepath.Join(tr.ws, "a/b.txt")
	resolveWant(t, spec, "/", "/workspace/sib", true, want)
	resolveWant(t, spec, "/", "/workspace/dir/b.txt", false, want)
	resolveWant(t, spec, "/", "/workspace/a/up", false, want)
	for _, p := range []string{"/workspace/passwd", "/workspace/out/secret", "/workspace/out", "/workspace/deep", "/workspace/abs"} {
		resolveRefused(t, spec, "/", p, false, "escapes its bind")
	}
}

func TestResolveDotDot(t *testing.T) {
	tr := resolveNewTree(t)
	spec := resolveSpec(resolveBind(tr.ws, "/workspace"), resolveBind(tr.data, "/data"))
	// Cleaned first, then matched: ".." above a bind's root is fine
	// where another bind covers the result.
	resolveWant(t, spec, "/", "/workspace/../data/f", false, filepath.Join(tr.data, "f"))
	resolveWant(t, spec, "/workspace/a", "../../data/f", false, filepath.Join(tr.data, "f"))
	resolveRefused(t, spec, "/workspace", "../outside/secret", false, "not on a host bind")
	resolveRefused(t, spec, "/workspace", "../../../../etc/passwd", false, "not on a host bind")
}

func TestResolveNewFiles(t *testing.T) {
	tr := resolveNewTree(t)
	spec := resolveSpec(resolveBind(tr.ws, "/workspace"))
	resolveWant(t, spec, "/", "/workspace/a/new.txt", true, filepath.Join(tr.ws, "a/new.txt"))
	resolveWant(t, spec, "/workspace", "x/y/z.txt", true, filepath.Join(tr.ws, "x/y/z.txt"))
	resolveSymlink(t, "a", filepath.Join(tr.ws, "dir"))
	resolveWant(t, spec, "/", "/workspace/dir/x/new", true, filepath.Join(tr.ws, "a/x/new"))

	// An existing parent that is a symlink out of the bind.
	resolveSymlink(t, "../outside", filepath.Join(tr.ws, "out"))
	resolveSymlink(t, "/tmp", filepath.Join(tr.ws, "tmp"))
	resolveRefused(t, spec, "/", "/workspace/out/new.txt", true, "escapes its bind")
	resolveRefused(t, spec, "/", "/workspace/out/x/y", true, "escapes its bind")
	resolveRefused(t, spec, "/", "/workspace/tmp/new.txt", true, "escapes its bind")
	// A dangling symlink whose target would leave the bind once its
	// missing directory appears ("missing/../../outside/new").
	resolveSymlink(t, "missing/../../outside/new", filepath.Join(tr.ws, "dang"))
	resolveRefused(t, spec, "/", "/workspace/dang", true, "dangling symlink")
	resolveRefused(t, spec, "/", "/workspace/dang/x", true, "dangling symlink")
	if _, err := os.Stat(filepath.Join(tr.outside, "new")); err == nil {
		t.Error("outside/new exists")
	}
	// Beneath a regular file nothing can be created.
	_, err := Resolve(spec, "/", "/workspace/a/b.txt/new", true)
	var pe *PathError
	if !errors.Is(err, unix.ENOTDIR) || errors.As(err, &pe) {
		t.Errorf("beneath a file: %v, want ENOTDIR", err)
	}
}

func TestResolveFileBind(t *testing.T) {
	tr := resolveNewTree(t)
	spec := resolveSpec(resolveBind(tr.ws, "/workspace"), resolveBind(tr.file, "/etc/hosts", "ro"), resolveBind(tr.file, "/workspace/hosts"))
	resolveWant(t, spec, "/", "/etc/hosts", false, tr.file)
	resolveWant(t, spec, "/etc", "hosts", false, tr.file)
	resolveRefused(t, spec, "/", "/etc/hosts", true, "read-only in the sandbox")
	resolveWant(t, spec, "/", "/workspace/hosts", true, tr.file)
	_, err := Resolve(spec, "/", "/etc/hosts/x", false)
	var pe *PathError
	if !errors.Is(err, unix.ENOTDIR) || errors.As(err, &pe) {
		t.Errorf("beneath a file bind: %v, want ENOTDIR", err)
	}
	resolveRefused(t, spec, "/", "/etc/passwd", false, "not on a host bind")
}

func TestResolveNUL(t *testing.T) {
	tr := resolveNewTree(t)
	spec := resolveSpec(resolveBind(tr.ws, "/workspace"))
	resolveRefused(t, spec, "/", "/workspace/a\x00/b.txt", false, "NUL")
	resolveRefused(t, spec, "/workspace/a", "b.txt\x00", false, "NUL")
}

// TestResolveSourceSymlink: a bind source turned into a symlink after the
// start (say, from inside the sandbox through a bind of its parent) is
// not followed.
func TestResolveSourceSymlink(t *testing.T) {
	tr := resolveNewTree(t)
	link := filepath.Join(tr.base, "link")
	resolveSymlink(t, tr.outside, link)
	spec := resolveSpec(resolveBind(link, "/src"))
	resolveRefused(t, spec, "/", "/src/secret", false, "holds a symlink")
}

// TestResolveHostMounts uses the host's /proc, a mount beneath "/": an
// rbind shows it, a plain bind does not.
func TestResolveHostMounts(t *testing.T) {
	if _, err := os.Stat("/proc/version"); err != nil {
		t.Skip(err)
	}
	rbind := resolveSpec(resolveBind("/", "/host", "ro"))
	resolveWant(t, rbind, "/", "/host/proc/version", false, "/proc/version")
	resolveWant(t, rbind, "/host", "", false, "/")
	// A magic link is refused, though not as policy: see resolveIn.
	if got, err := Resolve(rbind, "/", "/host/proc/self/root/etc/passwd", false); err == nil {
		t.Errorf("a magic link resolved to %s", got)
	}
	plain := resolveSpec(specs.Mount{Type: "bind", Source: "/", Destination: "/host", Options: []string{"ro"}})
	resolveRefused(t, plain, "/", "/host/proc/version", false, "crosses a host mount point")
}

// TestResolveFDPathDeleted: the kernel names a removed directory
// "PATH (deleted)", a name the sandbox can give to a symlink or a
// directory of its own.
func TestResolveFDPathDeleted(t *testing.T) {
	tr := resolveNewTree(t)
	for _, fake := range []string{"symlink", "dir"} {
		d := filepath.Join(tr.ws, fake)
		resolveMkdir(t, d)
		fd, err := resolveOpen(unix.AT_FDCWD, d, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if got, err := resolveFDPath(fd); err != nil || got != d {
			t.Fatalf("resolveFDPath = %q, %v; want %s", got, err, d)
		}
		if err := os.Remove(d); err != nil {
			t.Fatal(err)
		}
		if fake == "symlink" {
			resolveSymlink(t, tr.outside, d+" (deleted)")
		} else {
			resolveMkdir(t, d+" (deleted)")
		}
		if got, err := resolveFDPath(fd); !errors.Is(err, errResolveMoved) {
			t.Errorf("%s: resolveFDPath of a removed directory = %q, %v; want errResolveMoved", fake, got, err)
		}
	}
}
