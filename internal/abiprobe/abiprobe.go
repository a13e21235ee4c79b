// Package abiprobe enters the kernel through the 32-bit i386 syscall gate
// (int $0x80) from a 64-bit process. Tests use it to check that a seccomp
// filter for x86_64 cannot be bypassed through the compat ABI; nothing else
// should import it.
package abiprobe

// Supported reports whether Int80 exists on this architecture.
const Supported = supported
