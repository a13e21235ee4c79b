//go:build linux

package mounts

import (
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// hasOpt reports whether the OCI options hold o.
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
