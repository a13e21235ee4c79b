package darwin

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestStaticResolver(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp":                  "/private/tmp",
		"/tmp/x/../y":           "/private/tmp/y",
		"/var/folders/ab/T":     "/private/var/folders/ab/T",
		"/etc/hosts":            "/private/etc/hosts",
		"/tmpfoo":               "/tmpfoo",
		"/Users/alice":          "/Users/alice",
		"/private/var/folders/": "/private/var/folders",
	} {
		got, err := StaticResolver(in)
		if err != nil || got != want {
			t.Errorf("StaticResolver(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := StaticResolver("rel"); err == nil {
		t.Error("relative path accepted")
	}
}

func TestHostResolver(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "dotfiles", "ssh")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, ".ssh")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		link:                                real,
		filepath.Join(link, "id_ed25519"):   filepath.Join(real, "id_ed25519"),
		filepath.Join(dir, "missing", "a"):  filepath.Join(dir, "missing", "a"),
		filepath.Join(dir, "dotfiles", "."): filepath.Join(dir, "dotfiles"),
	} {
		got, err := HostResolver(in)
		if err != nil || got != want {
			t.Errorf("HostResolver(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := HostResolver("rel"); err == nil {
		t.Error("relative path accepted")
	}
}

func TestPathHelpers(t *testing.T) {
	if got := ancestors("/a/b/c"); !slices.Equal(got, []string{"/a/b", "/a", "/"}) {
		t.Errorf("ancestors = %q", got)
	}
	if got := ancestors("/a"); !slices.Equal(got, []string{"/"}) {
		t.Errorf("ancestors(/a) = %q", got)
	}
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"/a/b", "/a", true}, {"/a", "/a", true}, {"/ab", "/a", false}, {"/a", "/", true}, {"/", "/a", false},
	} {
		if got := within(c.p, c.dir); got != c.want {
			t.Errorf("within(%q, %q) = %v", c.p, c.dir, got)
		}
	}
	if depth("/") != 0 || depth("/a/b") != 2 {
		t.Error("depth")
	}
}

func TestPtyName(t *testing.T) {
	if got := ptyName(16<<24 | 3); got != "/dev/ttys003" {
		t.Errorf("ptyName = %q", got)
	}
	if got := ptyName(1234); got != "/dev/ttys1234" {
		t.Errorf("ptyName = %q", got)
	}
}
