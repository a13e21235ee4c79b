package abiprobe

const supported = true

// Int80 makes i386 system call nr with up to three arguments and returns
// the kernel's raw result (a negative errno on failure).
//
//go:noescape
func Int80(nr, a1, a2, a3 uintptr) (r uintptr)
