//go:build !linux

package nsinit

// Dispatch does nothing: only Linux re-executes the binary as a holder.
func Dispatch() {}
