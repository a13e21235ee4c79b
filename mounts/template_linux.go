//go:build linux

package mounts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// A root template is the fixed part of a tmpfs root kept in a directory on
// the host: the mount points, the symlinks and the copied files. The init
// binds it read-only as the root instead of building that part in a fresh
// tmpfs on every spawn (bench/README, "Against the target"). The template
// is shared between sandboxes, so:
//   - its name is a digest of everything it was built from, the copy
//     sources' identities and change times included, so a changed host
//     file means another template;
//   - whoever uses it holds a shared flock on its lock file, which a sweep
//     must beat with an exclusive one before it removes anything. The lock
//     files are in the caller's private state directory, so nobody else
//     can take them; the init keeps the parent's lock fd (a regular file,
//     no way to a host directory) for its life, and opens the template by
//     its path, since only a mount of its own namespace clones;
//   - a sandbox that could remount its root (CAP_SYS_ADMIN), or reach the
//     template through a writable bind, gets no template.

// RootTemplate returns the index of spec's root template mount.
func RootTemplate(spec *specs.Spec) (int, bool) {
	if len(spec.Mounts) > 0 && spec.Mounts[0].Type == TypeRootTemplate {
		return 0, true
	}
	return -1, false
}

// TemplateLock is the lock file named by a root template mount.
func TemplateLock(m *specs.Mount) string {
	for _, o := range m.Options {
		if l, ok := strings.CutPrefix(o, "lock="); ok {
			return l
		}
	}
	return ""
}

// templateSettle is how old a copy source's last change must be: a change
// within the same timestamp tick as the copy would leave the fingerprint
// as it was. The coarse clocks tick in milliseconds; two seconds is ample.
const templateSettle = 2 * time.Second

// templateCopyMax bounds a listed file a template copies; a bigger one
// stays a bind.
const templateCopyMax = 1 << 20

// templateKeep is how long a template nobody uses stays after a newer one
// was built: spawns that alternate between policies keep theirs.
const templateKeep = 10 * time.Minute

// NotTemplatableError says why a spec gets no root template. The spawn
// builds its root the ordinary way.
type NotTemplatableError struct {
	Reason string
	// Passing reports whether the same spec may get one moments later (a
	// copy source changed just now).
	Passing bool
}

func (e *NotTemplatableError) Error() string { return "mounts: no root template: " + e.Reason }

func notTemplatable(format string, a ...any) *NotTemplatableError {
	return &NotTemplatableError{Reason: fmt.Sprintf(format, a...)}
}

// entry is one path of a skeleton.
type entry struct {
	path   string // clean, absolute, not "/"
	kind   byte   // 'd' directory, 'f' empty file (a mount point), 'l' symlink, 'c' copy
	target string // the symlink's target or the copy's source
	src    unix.Stat_t
}

// Skeleton is what a template holds for one spec.
type Skeleton struct {
	entries []entry
	covered []int // Spec.Mounts indexes of the copies and symlinks it holds
}

// SkeletonOf derives the template of spec's root, or a
// *NotTemplatableError. now is the time the copy sources are judged
// settled against.
func SkeletonOf(spec *specs.Spec, now time.Time) (*Skeleton, error) {
	if spec.Root != nil && !spec.Root.Readonly {
		return nil, notTemplatable("the root is writable")
	}
	if _, ok := RootTemplate(spec); ok {
		return nil, notTemplatable("the spec has a root template already")
	}
	if c := spec.Process; c != nil && c.Capabilities != nil {
		for _, set := range [][]string{c.Capabilities.Bounding, c.Capabilities.Effective, c.Capabilities.Permitted,
			c.Capabilities.Inheritable, c.Capabilities.Ambient} {
			if slices.Contains(set, "CAP_SYS_ADMIN") {
				// It could remount the shared root read-write.
				return nil, notTemplatable("the sandbox keeps CAP_SYS_ADMIN")
			}
		}
	}
	s := &Skeleton{}
	var copyBinds []string
	if v := spec.Annotations[AnnotationTemplateCopies]; v != "" {
		copyBinds = strings.Split(v, ",")
	}
	at := map[string]int{} // path -> index in s.entries
	var mounted []string   // destinations of binds and new filesystems so far
	add := func(e entry) error {
		if i, ok := at[e.path]; ok {
			if prev := s.entries[i]; prev.kind == e.kind && (e.kind == 'd' || e.kind == 'f') {
				return nil
			}
			return notTemplatable("%s is made twice", e.path)
		}
		// Parents first, each a directory.
		for d := path.Dir(e.path); d != "/"; d = path.Dir(d) {
			if i, ok := at[d]; ok {
				if s.entries[i].kind != 'd' {
					return notTemplatable("%s is below a non-directory", e.path)
				}
				break
			}
		}
		var parents []string
		for d := path.Dir(e.path); d != "/"; d = path.Dir(d) {
			if _, ok := at[d]; ok {
				break
			}
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			at[parents[i]] = len(s.entries)
			s.entries = append(s.entries, entry{path: parents[i], kind: 'd'})
		}
		at[e.path] = len(s.entries)
		s.entries = append(s.entries, e)
		return nil
	}
	under := func(p string) bool {
		for _, m := range mounted {
			if m == "/" || p == m || strings.HasPrefix(p, m+"/") {
				return true
			}
		}
		return false
	}
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		dest := path.Clean("/" + m.Destination)
		if dest == "/" {
			return nil, notTemplatable("a mount replaces the root")
		}
		if under(dest) {
			continue // made per spawn, inside that mount
		}
		var err error
		switch {
		case m.Type == TypeSymlink:
			err = add(entry{path: dest, kind: 'l', target: m.Source})
			s.covered = append(s.covered, i)
		case m.Type == TypeCopy || copyBind(m, dest, copyBinds):
			var st unix.Stat_t
			if err := unix.Lstat(m.Source, &st); err != nil {
				return nil, notTemplatable("copy source %s: %v", m.Source, err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&unix.S_IROTH == 0 {
				return nil, notTemplatable("copy source %s is not a regular file readable by all", m.Source)
			}
			if changed := time.Unix(st.Ctim.Unix()); now.Sub(changed) < templateSettle {
				e := notTemplatable("copy source %s changed just now", m.Source)
				e.Passing = true
				return nil, e
			}
			err = add(entry{path: dest, kind: 'c', target: m.Source, src: st})
			s.covered = append(s.covered, i)
		case m.Type == "bind":
			var st unix.Stat_t
			if err := unix.Lstat(m.Source, &st); err != nil {
				return nil, notTemplatable("bind source %s: %v", m.Source, err)
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				err = add(entry{path: dest, kind: 'd'})
			case unix.S_IFLNK:
				return nil, notTemplatable("bind source %s is a symlink", m.Source)
			default:
				err = add(entry{path: dest, kind: 'f'})
			}
			mounted = append(mounted, dest)
		case IsFilesystem(m.Type):
			err = add(entry{path: dest, kind: 'd'})
			mounted = append(mounted, dest)
		default:
			return nil, notTemplatable("mount type %q", m.Type)
		}
		if err != nil {
			return nil, err
		}
	}
	if spec.Linux != nil {
		for _, d := range spec.Linux.Devices {
			if dest := path.Clean("/" + d.Path); !under(dest) {
				if err := add(entry{path: dest, kind: 'f'}); err != nil {
					return nil, err
				}
			}
		}
	}
	return s, nil
}

// copyBind reports whether m, at dest, is a read-only bind the template
// may hold as a copy (AnnotationTemplateCopies): of a regular file anyone
// may read, as a copy must be, and not too big. Otherwise, as when the
// file changed since it was compiled, it stays a bind.
func copyBind(m *specs.Mount, dest string, listed []string) bool {
	if m.Type != "bind" || !slices.Contains(listed, dest) || !slices.Contains(m.Options, "ro") ||
		slices.Contains(m.Options, "rw") || len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 {
		return false
	}
	var st unix.Stat_t
	return unix.Lstat(m.Source, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&unix.S_IROTH != 0 &&
		st.Size <= templateCopyMax
}

// Key names the template: a digest of the skeleton, of the copy sources'
// identities and change times, and of the builder.
func (s *Skeleton) Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "agentrun-template-1\x00%d\x00", os.Geteuid())
	for _, e := range s.entries {
		fmt.Fprintf(h, "%c\x00%s\x00%s\x00", e.kind, e.path, e.target)
		if e.kind == 'c' {
			st := &e.src
			fmt.Fprintf(h, "%d %d %d %d %d %d %d %d\x00", st.Dev, st.Ino, st.Size, st.Mode, st.Uid, st.Gid,
				st.Mtim.Nano(), st.Ctim.Nano())
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Spec returns spec with its root bound from the template t and without
// the copies and symlinks the template holds. spec is not changed.
func (s *Skeleton) Spec(spec *specs.Spec, t *Template) *specs.Spec {
	out := *spec
	out.Mounts = make([]specs.Mount, 0, len(spec.Mounts)+1-len(s.covered))
	out.Mounts = append(out.Mounts, specs.Mount{Destination: "/", Type: TypeRootTemplate, Source: t.Dir,
		Options: []string{"ro", "nosuid", "nodev", "lock=" + t.Lock}})
	for i, m := range spec.Mounts {
		if !slices.Contains(s.covered, i) {
			out.Mounts = append(out.Mounts, m)
		}
	}
	return &out
}

// Template is a template in use: while its lock is held, no sweep removes
// it.
type Template struct {
	Dir  string // the template, bound as the root
	Lock string // its lock file
	lock *os.File
}

// Close releases the template.
func (t *Template) Close() error { return t.lock.Close() }

// AcquireTemplate returns the template of s in templates, building it
// first when needed, with its lock in locks (a directory private to the
// caller, statedir's) held, and sweeps what nobody uses any more.
func AcquireTemplate(templates, locks string, s *Skeleton) (*Template, error) {
	key := s.Key()
	t := &Template{Dir: filepath.Join(templates, key), Lock: filepath.Join(locks, key+".lock")}
	lock, st, err := openLock(t.Lock, true)
	if err != nil {
		return nil, err
	}
	t.lock = lock
	// The last use, for sweeps; at most one write a minute.
	if time.Since(time.Unix(st.Mtim.Unix())) > time.Minute {
		_ = unix.Futimes(int(lock.Fd()), nil)
	}
	err = s.check(t.Dir)
	if err == nil {
		return t, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		// Something removed or changed part of it: a fresh one replaces
		// it, and sandboxes that still use it keep it until a sweep.
		if err := os.Rename(t.Dir, filepath.Join(templates, ".trash-"+key+"-"+randomName())); err != nil {
			t.Close()
			return nil, fmt.Errorf("mounts: retire template %s: %w", t.Dir, err)
		}
	}
	if err := s.build(templates, t.Dir); err != nil {
		t.Close()
		return nil, err
	}
	sweepTemplates(templates, locks, key, time.Now())
	return t, nil
}

// ErrTemplateBusy means a sweep holds the template (it is being removed).
var ErrTemplateBusy = errors.New("mounts: root template is being removed")

// OpenTemplateLock opens a template's lock file and takes its shared lock,
// as the parent does for the init: the file must exist, and the lock is
// taken without waiting (only a sweep holds it exclusively, and only while
// it removes the template).
func OpenTemplateLock(path string) (*os.File, error) {
	f, _, err := openLock(path, false)
	return f, err
}

// openLock is OpenTemplateLock, creating the file if asked; it also
// returns the file's status.
func openLock(path string, create bool) (*os.File, *unix.Stat_t, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
	if create {
		how.Flags |= unix.O_CREAT
		how.Mode = 0o600
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	if err != nil {
		return nil, nil, fmt.Errorf("mounts: open template lock %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil, ErrTemplateBusy
		}
		return nil, nil, fmt.Errorf("mounts: lock template %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("mounts: stat template lock %s: %w", path, err)
	}
	switch {
	case st.Nlink == 0:
		// A sweep removed it between our open and our lock.
		f.Close()
		return nil, nil, ErrTemplateBusy
	case st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0:
		f.Close()
		return nil, nil, fmt.Errorf("mounts: template lock %s is not the caller's own", path)
	}
	return f, &st, nil
}

// check opens the template at dir and verifies it.
func (s *Skeleton) check(dir string) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return fmt.Errorf("mounts: open template %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("mounts: template %s is not the caller's own", dir)
	}
	return s.verify(f)
}

// verify checks that the template open at f still holds every entry of s.
func (s *Skeleton) verify(f *os.File) error {
	fd := int(f.Fd())
	for _, e := range s.entries {
		rel := strings.TrimPrefix(e.path, "/")
		var st unix.Stat_t
		if err := unix.Fstatat(fd, rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			// Not %w: a missing entry is damage, not a missing template.
			return fmt.Errorf("mounts: template entry %s: %v", e.path, err)
		}
		want := map[byte]uint32{'d': unix.S_IFDIR, 'f': unix.S_IFREG, 'l': unix.S_IFLNK, 'c': unix.S_IFREG}[e.kind]
		ok := st.Mode&unix.S_IFMT == want
		switch e.kind {
		case 'l':
			t, err := readlinkat(fd, rel)
			ok = ok && err == nil && t == e.target
		case 'c':
			ok = ok && st.Size == e.src.Size
		case 'f':
			ok = ok && st.Size == 0
		}
		if !ok {
			return fmt.Errorf("mounts: template entry %s changed", e.path)
		}
	}
	return nil
}

func readlinkat(dirfd int, p string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, p, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// build makes the template in a fresh directory of templates and renames
// it into place at dir; a concurrent builder's equal template wins.
func (s *Skeleton) build(templates, dir string) error {
	tmp := filepath.Join(templates, ".tmp-"+randomName())
	if err := unix.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("mounts: build template: %w", err)
	}
	if err := s.fill(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	// The root's mode last: until now nobody could have entered it, and
	// the sandbox sees it as "/".
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("mounts: build template: %w", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE); err != nil {
		_ = os.RemoveAll(tmp)
		if errors.Is(err, unix.EEXIST) {
			return nil
		}
		return fmt.Errorf("mounts: build template %s: %w", dir, err)
	}
	return nil
}

func (s *Skeleton) fill(root string) error {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mounts: build template: %w", err)
	}
	defer unix.Close(rfd)
	for _, e := range s.entries {
		rel := strings.TrimPrefix(e.path, "/")
		var err error
		switch e.kind {
		case 'd':
			if err = unix.Mkdirat(rfd, rel, 0o755); err == nil {
				err = unix.Fchmodat(rfd, rel, 0o755, 0)
			}
		case 'f':
			var fd int
			if fd, err = unix.Openat(rfd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644); err == nil {
				err = unix.Fchmod(fd, 0o644)
				unix.Close(fd)
			}
		case 'l':
			err = unix.Symlinkat(e.target, rfd, rel)
		case 'c':
			err = copyTo(rfd, rel, &e)
		}
		if err != nil {
			return fmt.Errorf("mounts: build template entry %s: %w", e.path, err)
		}
	}
	return nil
}

// copyTo copies e's source, which must still be the file the skeleton
// fingerprinted, from before the read to after it, with the checks
// (openCopySource) and modes of the init's own copies (cinit.c's
// open_copy_source and copy_in).
func copyTo(rfd int, rel string, e *entry) error {
	src, err := openCopySource(e.target)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	same := func() error {
		var st unix.Stat_t
		if err := unix.Fstat(src, &st); err != nil {
			return err
		}
		if st.Dev != e.src.Dev || st.Ino != e.src.Ino || st.Size != e.src.Size || st.Ctim != e.src.Ctim || st.Mtim != e.src.Mtim {
			return fmt.Errorf("%s changed meanwhile", e.target)
		}
		return nil
	}
	if err := same(); err != nil {
		return err
	}
	fd, err := unix.Openat(rfd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// A source that shrank or grew meanwhile fails same() below.
	if err := sendAll(fd, src, e.src.Size); err != nil {
		return err
	}
	if err := same(); err != nil {
		return err
	}
	return unix.Fchmod(fd, e.src.Mode&0o755)
}

func randomName() string {
	var b [8]byte
	if _, err := unix.Getrandom(b[:], unix.GRND_NONBLOCK); err != nil {
		return fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}

// sweepTemplates removes what nobody uses any more: build directories
// left by killed builders, retired templates, templates other than keep
// that nobody used for templateKeep, and lock files without a template. A
// template in use (its lock held shared) is left alone.
func sweepTemplates(templates, locks, keep string, now time.Time) {
	ents, err := os.ReadDir(templates)
	if err != nil {
		return
	}
	for _, de := range ents {
		name := de.Name()
		if name == keep || !de.IsDir() {
			continue
		}
		p := filepath.Join(templates, name)
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			if info, err := de.Info(); err == nil && now.Sub(info.ModTime()) > time.Minute {
				_ = os.RemoveAll(p)
			}
		case strings.HasPrefix(name, ".trash-"):
			key, _, _ := strings.Cut(strings.TrimPrefix(name, ".trash-"), "-")
			removeUnused(p, filepath.Join(locks, key+".lock"), false)
		default:
			lock := filepath.Join(locks, name+".lock")
			used, err := os.Lstat(lock)
			if err != nil {
				used, err = de.Info()
			}
			if err == nil && now.Sub(used.ModTime()) > templateKeep {
				removeUnused(p, lock, true)
			}
		}
	}
	// Lock files of templates that are gone.
	lents, _ := os.ReadDir(locks)
	for _, de := range lents {
		key, ok := strings.CutSuffix(de.Name(), ".lock")
		if !ok || key == keep || exists(filepath.Join(templates, key)) {
			continue
		}
		if info, err := de.Info(); err == nil && now.Sub(info.ModTime()) > time.Minute {
			removeUnused("", filepath.Join(locks, de.Name()), true)
		}
	}
}

// removeUnused removes the template at p (if any) unless someone holds its
// lock, and with dropLock the lock file too (a retired template's lock
// belongs to the template that replaced it).
func removeUnused(p, lock string, dropLock bool) {
	fd, err := unix.Openat2(unix.AT_FDCWD, lock, &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC, Mode: 0o600, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	if p != "" {
		if dropLock {
			// No new user finds it from here on.
			trash := filepath.Join(filepath.Dir(p), ".trash-"+filepath.Base(p)+"-"+randomName())
			if os.Rename(p, trash) != nil {
				return
			}
			p = trash
		}
		if os.RemoveAll(p) != nil {
			return
		}
	}
	if dropLock {
		_ = unix.Unlink(lock)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
