//go:build linux

package cgroups

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// writeFile writes data to an existing cgroupfs file in one write(2), which
// is how cgroupfs expects values. Unlike os.WriteFile it never creates or
// truncates, so a missing controller file reads as ENOENT, not EACCES.
func writeFile(path, data string) error {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		_, err = unix.Write(fd, []byte(data))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &fs.PathError{Op: "write " + quoteShort(data), Path: path, Err: err}
	}
	return nil
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return `"` + s + `"`
}

// writable reports whether the effective uid may write path (AT_EACCESS:
// the effective, not the real, ids count, as they do for the write itself).
func writable(path string) error {
	return unix.Faccessat(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// subdirsDeepestFirst lists dir and every directory below it, children
// before parents, so rmdir can go down the list.
func subdirsDeepestFirst(dir string) []string {
	var out []string
	var walk func(d string)
	walk = func(d string) {
		ents, err := os.ReadDir(d)
		if err == nil {
			for _, e := range ents {
				if e.IsDir() {
					walk(filepath.Join(d, e.Name()))
				}
			}
		}
		out = append(out, d)
	}
	walk(dir)
	return out
}

// rmdirRetry removes an (empty) cgroup directory, retrying while the kernel
// still reports it busy: tasks that were just killed leave their cgroup a
// moment after they stop running.
func rmdirRetry(dir string, deadline time.Time) error {
	delay := time.Millisecond
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err == unix.EINTR {
			continue
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
		}
		time.Sleep(delay)
		delay = min(delay*2, 50*time.Millisecond)
	}
}

// mkdirOK creates a directory, accepting one that already exists.
func mkdirOK(dir string) error {
	err := unix.Mkdir(dir, 0o755)
	if err == nil || errors.Is(err, unix.EEXIST) {
		return nil
	}
	return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
}

// isPermission reports errors meaning "this caller may not": the cases an
// UnusableError explains rather than a plain error.
func isPermission(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS)
}
