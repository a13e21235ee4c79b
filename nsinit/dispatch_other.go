//go:build !linux

package nsinit

// Dispatch does nothing where there is no Linux init to re-exec.
func Dispatch() {}

// DiscardPrestart does nothing: only Linux prestarts.
func DiscardPrestart() {}
