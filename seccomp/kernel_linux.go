//go:build linux

package seccomp

import "golang.org/x/sys/unix"

// kernelRelease returns the running kernel's release string, or "".
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
