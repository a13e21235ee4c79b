//go:build linux

package mounts

import (
	"errors"
	"fmt"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// stagingDir is where the fresh root is assembled before pivot_root. It is a
// path in the sandbox's private mount namespace; the host never sees it.
const stagingDir = "/tmp"

// Prepared maps an index of Spec.Mounts to a detached mount (from
// open_tree) that the parent already configured, e.g. an idmapped bind that
// only host root could create. The mount is attached as is.
type Prepared map[int]int

// Setup assembles the root described by spec on a fresh tmpfs, pivots into
// it, applies masked and read-only paths and leaves the cwd at "/".
func Setup(spec *specs.Spec, prepared Prepared) error {
	// Nothing we mount may propagate anywhere, and later host mounts must
	// not appear inside.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return &Error{Op: "make-rprivate", Dest: "/", Err: err}
	}
	// Every host source is cloned before the staging tmpfs exists, so no
	// source path is resolved after that mount could shadow it.
	trees, err := cloneSources(spec, prepared)
	defer trees.close()
	if err != nil {
		return err
	}
	ti, templated := RootTemplate(spec)
	if templated {
		// The root template (template_linux.go) instead of a fresh tmpfs.
		if err := attachAt(trees.mounts[ti], stagingDir); err != nil {
			return &Error{Op: "root template", Dest: "/", Err: err}
		}
	} else if err := unix.Mount("tmpfs", stagingDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		return &Error{Op: "mount tmpfs root", Dest: "/", Err: err}
	}
	rootfd, err := unix.Open(stagingDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &Error{Op: "open root", Dest: "/", Err: err}
	}
	defer unix.Close(rootfd)

	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if templated && i == ti {
			continue
		}
		var err error
		switch m.Type {
		case "bind":
			err = attachTree(rootfd, trees.mounts[i], m.Destination)
		case TypeCopy:
			err = copyIn(rootfd, trees.mounts[i], m.Destination)
		default:
			err = mountOne(rootfd, m)
		}
		if err != nil {
			return &Error{Op: m.Type, Dest: m.Destination, Err: err}
		}
	}
	if spec.Linux != nil {
		for i, d := range spec.Linux.Devices {
			if err := attachTree(rootfd, trees.devices[i], d.Path); err != nil {
				return &Error{Op: "device", Dest: d.Path, Err: err}
			}
		}
		for _, p := range spec.Linux.MaskedPaths {
			if err := maskPath(rootfd, trees.null, p); err != nil {
				return &Error{Op: "mask", Dest: p, Err: err}
			}
		}
		for _, p := range spec.Linux.ReadonlyPaths {
			if err := readonlyPath(rootfd, p); err != nil {
				return &Error{Op: "readonly", Dest: p, Err: err}
			}
		}
	}
	return pivot(rootfd, spec.Root == nil || spec.Root.Readonly)
}

// sourceTrees are detached clones of every host path the root needs.
type sourceTrees struct {
	mounts  []int // by Spec.Mounts index: trees of binds, open files of copies, else -1
	devices []int // by Spec.Linux.Devices index
	null    int   // O_PATH fd of the host /dev/null, cloned per masked file
}

func (t *sourceTrees) close() {
	for _, fds := range [][]int{t.mounts, t.devices, {t.null}} {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
}

func cloneSources(spec *specs.Spec, prepared Prepared) (*sourceTrees, error) {
	t := &sourceTrees{mounts: make([]int, len(spec.Mounts)), null: -1}
	for i := range t.mounts {
		t.mounts[i] = -1
	}
	ti, templated := RootTemplate(spec)
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if templated && i == ti {
			fd, err := cloneTemplate(m, prepared, i)
			if err != nil {
				return t, &Error{Op: "root template", Dest: "/", Err: err}
			}
			t.mounts[i] = fd
			continue
		}
		if m.Type == TypeCopy {
			fd, err := openCopySource(m.Source)
			if err != nil {
				return t, &Error{Op: "copy", Dest: m.Destination, Err: err}
			}
			t.mounts[i] = fd
			continue
		}
		if m.Type != "bind" {
			continue
		}
		if fd, ok := prepared[i]; ok {
			// Configured by the parent, which owns it; attached as is.
			t.mounts[i] = fd
			continue
		}
		fd, err := CloneBind(m, -1)
		if err != nil {
			return t, &Error{Op: "bind", Dest: m.Destination, Err: err}
		}
		t.mounts[i] = fd
	}
	if spec.Linux == nil {
		return t, nil
	}
	for _, d := range spec.Linux.Devices {
		fd, err := unix.OpenTree(unix.AT_FDCWD, d.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
		if err == nil {
			err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC})
		}
		if err != nil {
			return t, &Error{Op: "device", Dest: d.Path, Err: fmt.Errorf("clone host %s: %w", d.Path, err)}
		}
		t.devices = append(t.devices, fd)
	}
	if len(spec.Linux.MaskedPaths) > 0 {
		fd, err := unix.Open("/dev/null", unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return t, &Error{Op: "mask", Dest: "/dev/null", Err: err}
		}
		t.null = fd
	}
	return t, nil
}

// cloneTemplate clones the root template (template_linux.go), opened by
// its path: only a mount of this namespace clones. The parent passed the
// template's lock file, locked; that fd stays open, close-on-exec, for the
// init's life and keeps sweeps away from the template.
func cloneTemplate(m *specs.Mount, prepared Prepared, i int) (int, error) {
	fd, ok := prepared[i]
	var st unix.Stat_t
	if !ok || unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, errors.New("no template lock from the parent")
	}
	unix.CloseOnExec(fd)
	src, err := unix.Openat2(unix.AT_FDCWD, m.Source, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", m.Source, err)
	}
	defer unix.Close(src)
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("clone: %w", err)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: attrsFor(m.Options) | unix.MOUNT_ATTR_RDONLY}); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("set attributes: %w", err)
	}
	return tree, nil
}

// attachAt attaches a detached tree at the path p.
func attachAt(tree int, p string) error {
	target, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	return attach(tree, target)
}

// Error is a failed mount step; Dest is the path inside the sandbox.
type Error struct {
	Op   string
	Dest string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("mounts: %s %s: %v", e.Op, e.Dest, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

func mountOne(rootfd int, m *specs.Mount) error {
	switch {
	case m.Type == TypeSymlink:
		return symlinkIn(rootfd, m.Source, m.Destination)
	case IsFilesystem(m.Type):
		return fsMount(rootfd, m)
	}
	return fmt.Errorf("unsupported mount type %q", m.Type)
}

func hasOpt(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// attrsFor maps the OCI options we honour to mount_setattr attributes.
func attrsFor(opts []string) uint64 {
	var a uint64
	for _, o := range opts {
		switch o {
		case "ro":
			a |= unix.MOUNT_ATTR_RDONLY
		case "nosuid":
			a |= unix.MOUNT_ATTR_NOSUID
		case "nodev":
			a |= unix.MOUNT_ATTR_NODEV
		case "noexec":
			a |= unix.MOUNT_ATTR_NOEXEC
		}
	}
	return a
}

// CloneBind makes a detached clone of a bind source with the attributes its
// options ask for. With userns >= 0 the clone is also an idmapped mount
// through that user namespace, which needs privilege over the source's
// filesystem (the parent does it as host root).
func CloneBind(m *specs.Mount, userns int) (int, error) {
	recursive := hasOpt(m.Options, "rbind")
	// No symlink anywhere in the source: the compiler resolved it, so a
	// symlink here was swapped in after the check.
	src, err := unix.Openat2(unix.AT_FDCWD, m.Source, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("open source %s: %w", m.Source, err)
	}
	defer unix.Close(src)
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	setFlags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(src, "", flags)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", m.Source, err)
	}
	attr := unix.MountAttr{Attr_set: attrsFor(m.Options)}
	if userns >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns)
	}
	if attr.Attr_set != 0 {
		if err := unix.MountSetattr(tree, "", setFlags, &attr); err != nil {
			unix.Close(tree)
			if userns >= 0 {
				return -1, fmt.Errorf("idmapped mount of %s (the filesystem must support idmapped mounts, Linux 5.12+): %w", m.Source, err)
			}
			return -1, fmt.Errorf("set attributes on %s: %w", m.Source, err)
		}
	}
	return tree, nil
}

// attachTree attaches a detached tree at dest, creating a directory or an
// empty file as the mount point depending on what the tree's root is.
func attachTree(rootfd, tree int, dest string) error {
	var st unix.Stat_t
	if err := unix.Fstat(tree, &st); err != nil {
		return fmt.Errorf("stat source: %w", err)
	}
	target, err := makeTarget(rootfd, dest, st.Mode&unix.S_IFMT == unix.S_IFDIR)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	return attach(tree, target)
}

func attach(tree, target int) error {
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return nil
}

// fsMount creates a new filesystem instance (tmpfs, proc, devpts) with the
// new mount API and attaches it at the destination.
func fsMount(rootfd int, m *specs.Mount) error {
	fsfd, err := unix.Fsopen(m.Type, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen %s: %w", m.Type, err)
	}
	defer unix.Close(fsfd)
	for _, p := range FSParams(m.Options) {
		if p.Flag {
			err = unix.FsconfigSetFlag(fsfd, p.Key)
		} else {
			err = unix.FsconfigSetString(fsfd, p.Key, p.Value)
		}
		if err != nil {
			return fmt.Errorf("%s option %s: %w", m.Type, p.Key, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("create %s: %w", m.Type, err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, int(attrsFor(m.Options)))
	if err != nil {
		return fmt.Errorf("fsmount %s: %w", m.Type, err)
	}
	defer unix.Close(mfd)
	target, err := makeTarget(rootfd, m.Destination, true)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	return attach(mfd, target)
}

// maskPath hides p: files get /dev/null bound over them, directories an
// empty read-only tmpfs. Paths that do not exist are fine.
func maskPath(rootfd, null int, p string) error {
	target, err := resolveIn(rootfd, p, unix.O_PATH|unix.O_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(target)
	var st unix.Stat_t
	if err := unix.Fstat(target, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(fsfd)
		if err := unix.FsconfigSetString(fsfd, "size", "0"); err != nil {
			return err
		}
		if err := unix.FsconfigCreate(fsfd); err != nil {
			return err
		}
		mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(mfd)
		return attach(mfd, target)
	}
	tree, err := unix.OpenTree(null, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}); err != nil {
		return err
	}
	return attach(tree, target)
}

// readonlyPath stacks a read-only clone of p over itself.
func readonlyPath(rootfd int, p string) error {
	target, err := resolveIn(rootfd, p, unix.O_PATH|unix.O_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(target)
	tree, err := unix.OpenTree(target, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return err
	}
	return attach(tree, target)
}

func pivot(rootfd int, readonly bool) error {
	if err := unix.Fchdir(rootfd); err != nil {
		return &Error{Op: "chdir", Dest: "/", Err: err}
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; the
	// detach below drops it, so no path to the host tree remains.
	if err := unix.PivotRoot(".", "."); err != nil {
		return &Error{Op: "pivot_root", Dest: "/", Err: err}
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return &Error{Op: "detach old root", Dest: "/", Err: err}
	}
	if err := unix.Chdir("/"); err != nil {
		return &Error{Op: "chdir", Dest: "/", Err: err}
	}
	if readonly {
		if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return &Error{Op: "remount read-only", Dest: "/", Err: err}
		}
	}
	return nil
}

// resolveIn opens p relative to rootfd as if rootfd were "/": symlinks and
// ".." cannot leave it, and /proc magic links are refused.
func resolveIn(rootfd int, p string, flags int) (int, error) {
	return unix.Openat2(rootfd, strings.TrimPrefix(p, "/"), &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// mkdirAllIn returns an O_PATH fd for directory p inside rootfd, creating
// missing components. Each component is created relative to its resolved
// parent and re-opened without following symlinks, so a symlink planted
// between the two steps fails instead of redirecting the mount.
func mkdirAllIn(rootfd int, p string) (int, error) {
	p = path.Clean("/" + p)
	if p == "/" {
		return unix.Dup(rootfd)
	}
	fd, err := resolveIn(rootfd, p, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	dir, base := path.Split(p)
	pfd, err := mkdirAllIn(rootfd, dir)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, base, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("mkdir %s: %w", p, err)
	}
	return unix.Openat2(pfd, base, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
}

// makeTarget returns an fd for the mount point p, creating a directory or
// an empty file as needed.
func makeTarget(rootfd int, p string, dir bool) (int, error) {
	if dir {
		fd, err := mkdirAllIn(rootfd, p)
		if err != nil {
			return -1, fmt.Errorf("mount point %s: %w", p, err)
		}
		return fd, nil
	}
	parent, base := path.Split(path.Clean(p))
	pfd, err := mkdirAllIn(rootfd, parent)
	if err != nil {
		return -1, fmt.Errorf("mount point %s: %w", p, err)
	}
	defer unix.Close(pfd)
	// O_PATH first: opening an existing FIFO for reading would block, and
	// the sandbox can plant one in the workspace to stall later spawns.
	fd, err := unix.Openat(pfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		fd, err = unix.Openat(pfd, base, unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	}
	if err != nil {
		return -1, fmt.Errorf("mount point %s: %w", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK || st.Mode&unix.S_IFMT == unix.S_IFDIR {
		unix.Close(fd)
		return -1, fmt.Errorf("mount point %s: not a file (a symlink or directory is in the way)", p)
	}
	return fd, nil
}

func symlinkIn(rootfd int, target, p string) error {
	parent, base := path.Split(path.Clean(p))
	pfd, err := mkdirAllIn(rootfd, parent)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		return fmt.Errorf("symlink %s -> %s: %w", p, target, err)
	}
	return nil
}

// openCopySource opens the source of a TypeCopy entry: no symlink in the
// path (the compiler resolved them, as for binds), and non-blocking, so a
// FIFO swapped in cannot stall the setup; it must be a regular file that
// anyone may read, since the copy belongs to the sandbox user.
func openCopySource(src string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, src, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("open source %s: %w", src, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, fmt.Errorf("copy source %s: not a regular file", src)
	}
	if st.Mode&unix.S_IROTH == 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("copy source %s: not readable by all", src)
	}
	return fd, nil
}

// copyIn writes the content of src, an open regular file, to a new file
// at p in the root, with src's permission bits less set-id and write bits
// for group and others.
func copyIn(rootfd, src int, p string) error {
	parent, base := path.Split(path.Clean(p))
	pfd, err := mkdirAllIn(rootfd, parent)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	// O_EXCL: the root is fresh, so anything already there is a conflict.
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("copy %s: create: %w", p, err)
	}
	defer unix.Close(fd)
	if err := sendAll(fd, src, st.Size); err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	if err := unix.Fchmod(fd, st.Mode&0o755); err != nil {
		return fmt.Errorf("copy %s: chmod: %w", p, err)
	}
	return nil
}

// sendAll copies size bytes of src, from its offset, to dst; less when the
// source shrank meanwhile.
func sendAll(dst, src int, size int64) error {
	for left := size; left > 0; {
		n, err := unix.Sendfile(dst, src, nil, int(left))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			break // the source shrank
		}
		left -= int64(n)
	}
	return nil
}
