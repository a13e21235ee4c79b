//go:build linux

package agentrun

import "golang.org/x/sys/unix"

// physicalWd is the kernel's view of the current directory: no symlink
// components, unlike a $PWD-based answer.
func physicalWd() (string, error) { return unix.Getwd() }
