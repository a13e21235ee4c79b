//go:build linux && cgo && amd64

package seccomp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func archProbes() []probe {
	fs := unsafe.Pointer(new(uint64))
	return []probe{
		{"iopl", "EPERM", sys(unix.SYS_IOPL, 0)},
		{"ioperm", "EPERM", sys(unix.SYS_IOPERM, 0, 0, 0)},
		{"modify_ldt", "EPERM", sys(unix.SYS_MODIFY_LDT, 0, 0, 0)},
		{"sysfs (real, not listed)", "ENOSYS", sys(unix.SYS_SYSFS, 3)},
		{"arch_prctl(ARCH_GET_FS)", "0", sys(unix.SYS_ARCH_PRCTL, 0x1003, fs)},
	}
}
