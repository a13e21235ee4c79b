// Package mounts owns the sandbox's root filesystem: it assembles a fresh
// tmpfs root from Spec.Mounts and Spec.Linux.Devices, applies masked and
// read-only paths and pivots into it. Every destination is resolved inside
// the new root with openat2(RESOLVE_IN_ROOT), so symlinks and ".." inside
// bound directories cannot redirect a mount out of it, and every mount is
// attached by file descriptor (open_tree/fsmount + move_mount) rather than
// by a path that could change between check and use.
package mounts
