//go:build linux

package mounts

// Pivot is pivot for the benchmarks in package mounts_test: the pivot_root
// step of Setup alone, with rootfd an O_PATH fd of the new root's mount.
func Pivot(rootfd int, readonly bool) error { return pivot(rootfd, readonly) }
