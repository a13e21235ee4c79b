// Package mounts owns the sandbox's root filesystem: it assembles the root
// from Spec.Mounts and Spec.Linux.Devices, on a fresh tmpfs or on a shared
// read-only root template that it builds, locks and sweeps
// (template_linux.go), applies masked and read-only paths and pivots into
// it. Every destination is resolved inside the new root with
// openat2(RESOLVE_IN_ROOT), so symlinks and ".." inside bound directories
// cannot redirect a mount out of it, and every mount is attached by file
// descriptor (open_tree/fsmount + move_mount) rather than by a path that
// could change between check and use.
package mounts
