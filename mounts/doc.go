// Package mounts owns the parts of the sandbox's root filesystem that the
// parent and the policy compiler handle; the C init (nsinit/internal/cinit)
// builds the root itself, from the plan nsinit encodes. The package holds:
//
//   - the agentrun mount types (TypeSymlink, TypeCopy, TypeRootTemplate) and
//     the reading of OCI mount options: the MOUNT_ATTR_* bits a mount gets
//     (Attrs), whether a bind is recursive (Recursive), which types are new
//     filesystem instances (IsFilesystem) and their fsconfig parameters
//     (FSParams);
//   - CloneBind, which clones a bind source into a detached tree by file
//     descriptor (open_tree), idmapped through a user namespace: only host
//     root may idmap a mount of a filesystem of the initial user namespace,
//     so the parent makes these trees and the init attaches them;
//   - root templates (template_linux.go): the fixed part of a tmpfs root,
//     built once per host state and kept in the state directory, held
//     under a shared lock while sandboxes use it and swept when unused. The
//     init binds one read-only as the root instead of building that part in
//     a fresh tmpfs on every spawn.
package mounts
