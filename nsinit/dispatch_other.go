//go:build !linux

package nsinit

// Dispatch does nothing: only Linux re-executes the binary as a holder.
func Dispatch() {}

// DiscardPrestart does nothing: only Linux prestarts.
func DiscardPrestart() {}
