//go:build !linux

package seccomp

// kernelRelease is unknown off Linux; minKernel conditions then hold.
func kernelRelease() string { return "" }
