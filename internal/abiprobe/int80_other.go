//go:build !amd64

package abiprobe

const supported = false

// Int80 does not exist off amd64; it returns -ENOSYS.
func Int80(nr, a1, a2, a3 uintptr) uintptr { return ^uintptr(37) }
