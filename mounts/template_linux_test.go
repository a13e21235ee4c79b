//go:build linux

package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// templateSpec is a small spec of the shapes a compiled policy has, with
// copy sources in a fresh directory whose files are settled (their change
// time moved into the past is impossible, so "now" moves forward).
func templateSpec(t *testing.T) (*specs.Spec, string) {
	t.Helper()
	src := t.TempDir()
	for name, mode := range map[string]os.FileMode{"passwd": 0o644, "hosts": 0o755 | os.ModeSetuid} {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte("content of "+name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(src, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{
		Mounts: []specs.Mount{
			{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro"}},
			{Destination: "/bin", Type: TypeSymlink, Source: "usr/bin"},
			{Destination: "/etc/passwd", Type: TypeCopy, Source: filepath.Join(src, "passwd")},
			{Destination: "/etc/hosts", Type: TypeCopy, Source: filepath.Join(src, "hosts")},
			{Destination: "/etc/ssl/certs", Type: "bind", Source: filepath.Join(src, "dir"), Options: []string{"rbind", "ro"}},
			{Destination: "/etc/one-file", Type: "bind", Source: filepath.Join(src, "passwd"), Options: []string{"bind", "ro"}},
			{Destination: "/proc", Type: "proc"},
			{Destination: "/dev", Type: "tmpfs"},
			{Destination: "/dev/fd", Type: TypeSymlink, Source: "/proc/self/fd"},
			{Destination: "/var/tmp", Type: "tmpfs"},
			{Destination: "/workspace", Type: "bind", Source: src, Options: []string{"rbind"}},
		},
		Linux: &specs.Linux{Devices: []specs.LinuxDevice{{Path: "/dev/null"}}},
	}
	return spec, src
}

// kinds maps each entry of s to its kind.
func kinds(s *Skeleton) map[string]byte {
	got := map[string]byte{}
	for _, e := range s.entries {
		got[e.path] = e.kind
	}
	return got
}

// later is a "now" by which every copy source has settled.
func later() time.Time { return time.Now().Add(templateSettle + time.Second) }

func TestSkeletonOf(t *testing.T) {
	spec, _ := templateSpec(t)
	s, err := SkeletonOf(spec, later())
	if err != nil {
		t.Fatal(err)
	}
	got := kinds(s)
	want := map[string]byte{
		"/usr": 'd', "/bin": 'l', "/etc": 'd', "/etc/passwd": 'c', "/etc/hosts": 'c', "/etc/ssl": 'd',
		"/etc/ssl/certs": 'd', "/etc/one-file": 'f', "/proc": 'd', "/dev": 'd', "/var": 'd', "/var/tmp": 'd',
		"/workspace": 'd',
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("entry %s: kind %q, want %q", p, got[p], k)
		}
	}
	// Inside a mount made per spawn: not the template's.
	for _, p := range []string{"/dev/fd", "/dev/null"} {
		if _, ok := got[p]; ok {
			t.Errorf("entry %s lies in /dev's tmpfs, yet the template has it", p)
		}
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	// The copies and the root's symlink leave the spec; /dev/fd stays.
	out := s.Spec(spec, &Template{Dir: "/templates/k", Lock: "/locks/k.lock"})
	if i, ok := RootTemplate(out); !ok || out.Mounts[i].Source != "/templates/k" || !hasOpt(out.Mounts[i].Options, "ro") ||
		TemplateLock(&out.Mounts[i]) != "/locks/k.lock" {
		t.Fatalf("no read-only root template first: %+v", out.Mounts[0])
	}
	var kept []string
	for _, m := range out.Mounts[1:] {
		kept = append(kept, m.Destination)
	}
	if strings.Join(kept, " ") != "/usr /etc/ssl/certs /etc/one-file /proc /dev /dev/fd /var/tmp /workspace" {
		t.Errorf("mounts left to the init: %v", kept)
	}
	if len(spec.Mounts) != 11 {
		t.Error("Spec changed its input")
	}
}

// TestSkeletonOfCopyBinds: a read-only bind of a file the compiler listed
// (AnnotationTemplateCopies) becomes a copy in the template, and leaves
// the spec; one that is not listed, not read-only, or whose file anyone
// may no longer read stays a bind.
func TestSkeletonOfCopyBinds(t *testing.T) {
	spec, src := templateSpec(t)
	priv := filepath.Join(src, "private")
	if err := os.WriteFile(priv, []byte("secret\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(src, "passwd")
	spec.Mounts = append(spec.Mounts,
		specs.Mount{Destination: "/etc/private", Type: "bind", Source: priv, Options: []string{"bind", "ro"}},
		specs.Mount{Destination: "/etc/rw-file", Type: "bind", Source: pub, Options: []string{"bind", "rw"}})
	spec.Annotations = map[string]string{AnnotationTemplateCopies: "/etc/one-file,/etc/private,/etc/rw-file"}
	s, err := SkeletonOf(spec, later())
	if err != nil {
		t.Fatal(err)
	}
	got := kinds(s)
	for p, k := range map[string]byte{"/etc/one-file": 'c', "/etc/private": 'f', "/etc/rw-file": 'f', "/etc/passwd": 'c'} {
		if got[p] != k {
			t.Errorf("entry %s: kind %q, want %q", p, got[p], k)
		}
	}
	out := s.Spec(spec, &Template{Dir: "/templates/k", Lock: "/locks/k.lock"})
	var kept []string
	for _, m := range out.Mounts[1:] {
		if strings.HasPrefix(m.Destination, "/etc/") {
			kept = append(kept, m.Destination)
		}
	}
	if strings.Join(kept, " ") != "/etc/ssl/certs /etc/private /etc/rw-file" {
		t.Errorf("/etc mounts left to the init: %v", kept)
	}
	// Unlisted, the same bind stays one.
	delete(spec.Annotations, AnnotationTemplateCopies)
	if s, err = SkeletonOf(spec, later()); err != nil {
		t.Fatal(err)
	}
	for _, e := range s.entries {
		if e.path == "/etc/one-file" && e.kind != 'f' {
			t.Errorf("an unlisted bind became %q", e.kind)
		}
	}
}

func TestSkeletonOfRefuses(t *testing.T) {
	for name, mutate := range map[string]func(*specs.Spec, string){
		"writable root": func(s *specs.Spec, _ string) { s.Root = &specs.Root{Readonly: false} },
		"CAP_SYS_ADMIN": func(s *specs.Spec, _ string) {
			s.Process = &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}}}
		},
		// The inits grant what Ambient names (keptCaps), bounding set or not.
		"ambient CAP_SYS_ADMIN": func(s *specs.Spec, _ string) {
			s.Process = &specs.Process{Capabilities: &specs.LinuxCapabilities{Ambient: []string{"CAP_SYS_ADMIN"}}}
		},
		"copy twice": func(s *specs.Spec, _ string) { s.Mounts = append(s.Mounts, s.Mounts[2]) },
		"below a symlink": func(s *specs.Spec, src string) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/bin/x", Type: TypeCopy, Source: filepath.Join(src, "passwd")})
		},
		"unreadable copy source": func(s *specs.Spec, src string) {
			if err := os.Chmod(filepath.Join(src, "passwd"), 0o640); err != nil {
				panic(err)
			}
		},
		"root mount": func(s *specs.Spec, src string) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/", Type: "bind", Source: src})
		},
	} {
		t.Run(name, func(t *testing.T) {
			spec, src := templateSpec(t)
			mutate(spec, src)
			_, err := SkeletonOf(spec, later())
			var nt *NotTemplatableError
			if !errors.As(err, &nt) {
				t.Fatalf("got %v, want a NotTemplatableError", err)
			}
		})
	}
	t.Run("unsettled copy source", func(t *testing.T) {
		spec, _ := templateSpec(t)
		var nt *NotTemplatableError
		if _, err := SkeletonOf(spec, time.Now()); !errors.As(err, &nt) {
			t.Fatalf("a copy source changed just now gave %v, want a NotTemplatableError", err)
		}
	})
}

func TestTemplateKeyFollowsSources(t *testing.T) {
	spec, src := templateSpec(t)
	s1, err := SkeletonOf(spec, later())
	if err != nil {
		t.Fatal(err)
	}
	// Same size, same mtime: only the change time tells.
	p := filepath.Join(src, "passwd")
	fi, _ := os.Stat(p)
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(p, []byte("CONTENT OF passwd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	s2, err := SkeletonOf(spec, later())
	if err != nil {
		t.Fatal(err)
	}
	if s1.Key() == s2.Key() {
		t.Fatal("a rewritten copy source (same size and mtime) kept the template's key")
	}
	s3, _ := SkeletonOf(spec, later())
	if s2.Key() != s3.Key() {
		t.Fatal("the same inputs gave two keys")
	}
}

// acquired is a template of templateSpec, acquired in fresh directories.
func acquired(t *testing.T) (s *Skeleton, dir, locks string, tm *Template) {
	t.Helper()
	spec, _ := templateSpec(t)
	s, err := SkeletonOf(spec, later())
	if err != nil {
		t.Fatal(err)
	}
	dir, locks = t.TempDir(), t.TempDir()
	if tm, err = AcquireTemplate(dir, locks, s); err != nil {
		t.Fatal(err)
	}
	return s, dir, locks, tm
}

func TestAcquireTemplate(t *testing.T) {
	s, dir, locks, tm := acquired(t)
	defer tm.Close()
	held, err := os.Open(tm.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if tm.Dir != filepath.Join(dir, s.Key()) {
		t.Fatalf("template at %s, want %s", tm.Dir, filepath.Join(dir, s.Key()))
	}
	b, err := os.ReadFile(filepath.Join(tm.Dir, "etc/passwd"))
	if err != nil || string(b) != "content of passwd\n" {
		t.Fatalf("copy: %q, %v", b, err)
	}
	fi, _ := os.Lstat(filepath.Join(tm.Dir, "etc/hosts"))
	if fi.Mode() != 0o755 {
		t.Errorf("copy of a 0755 set-uid file has mode %v, want 0755 (no set-id bits)", fi.Mode())
	}
	if l, _ := os.Readlink(filepath.Join(tm.Dir, "bin")); l != "usr/bin" {
		t.Errorf("symlink /bin -> %q", l)
	}
	if fi, err := os.Lstat(filepath.Join(tm.Dir, "etc/one-file")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("file mount point: %v, %v", fi, err)
	}
	if fi, _ := os.Lstat(tm.Dir); fi.Mode().Perm() != 0o755 {
		t.Errorf("template root mode %v, want 0755 (the sandbox's /)", fi.Mode().Perm())
	}

	// A second spawn reuses it.
	again, err := AcquireTemplate(dir, locks, s)
	if err != nil {
		t.Fatal(err)
	}
	if !sameDir(t, again.Dir, held) {
		t.Error("a second acquire built another template")
	}
	again.Close()

	// A part removed (a cleaner): retired, not reused, and its user keeps it.
	if err := os.Remove(filepath.Join(tm.Dir, "etc/one-file")); err != nil {
		t.Fatal(err)
	}
	fresh, err := AcquireTemplate(dir, locks, s)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if sameDir(t, fresh.Dir, held) {
		t.Fatal("a damaged template was reused")
	}
	if _, err := os.Lstat(filepath.Join(fresh.Dir, "etc/one-file")); err != nil {
		t.Errorf("the rebuilt template lacks the removed part: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(held.Fd()), &st); err != nil || st.Nlink == 0 {
		t.Errorf("the retired template was removed while its key is held: nlink %d, %v", st.Nlink, err)
	}
}

func sameDir(t *testing.T, p string, f *os.File) bool {
	t.Helper()
	fa, err1 := os.Stat(p)
	fb, err2 := f.Stat()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return os.SameFile(fa, fb)
}

// TestTemplateSweep: a sweep removes unused templates past their time,
// never one held, and never the one kept; a lock held by anyone else makes
// OpenTemplateLock fail at once instead of waiting.
func TestTemplateSweep(t *testing.T) {
	_, dir, locks, tm := acquired(t)
	// Last used long ago.
	old := time.Now().Add(-2 * templateKeep)
	if err := os.Chtimes(tm.Lock, old, old); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, ".tmp-killed")
	if err := os.Mkdir(leftover, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(leftover, old, old); err != nil {
		t.Fatal(err)
	}

	sweepTemplates(dir, locks, "other", time.Now())
	if !exists(tm.Dir) {
		t.Fatal("a held template was swept")
	}
	if exists(leftover) {
		t.Error("a killed builder's directory was left")
	}
	tm.Close()
	sweepTemplates(dir, locks, filepath.Base(tm.Dir), time.Now())
	if !exists(tm.Dir) {
		t.Fatal("the kept template was swept")
	}

	// The init's lock: held through a second open file, as the parent
	// passes it on.
	initLock, err := OpenTemplateLock(tm.Lock)
	if err != nil {
		t.Fatal(err)
	}
	sweepTemplates(dir, locks, "other", time.Now())
	if !exists(tm.Dir) {
		t.Fatal("a template whose lock the init holds was swept")
	}
	initLock.Close()

	// Someone holds it exclusively: no wait, a typed error.
	fd, err := unix.Open(tm.Lock, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := OpenTemplateLock(tm.Lock)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTemplateBusy) {
			t.Errorf("OpenTemplateLock of a template locked by another: %v, want ErrTemplateBusy", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OpenTemplateLock waited for another's lock")
	}
	unix.Close(fd)

	sweepTemplates(dir, locks, "other", time.Now())
	if exists(tm.Dir) || exists(tm.Lock) {
		t.Error("an unused template past its time, or its lock, was left")
	}
	for _, d := range []string{dir, locks} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("left in %s: %v", d, ents)
		}
	}
	// A lock taken meanwhile by a spawn on the removed template is stale.
	if f, err := OpenTemplateLock(tm.Lock); err == nil {
		f.Close()
		t.Error("the removed template's lock opened")
	}
}
