package mounts

// The agentrun extensions of an OCI Spec's mounts and annotations, shared
// by the compiler (which writes them), the root templates and nsinit (which
// read them). They are defined here alone, in a file every platform builds.

// TypeSymlink is the agentrun mount type that creates a symlink at the
// destination pointing at the source. It is used only with a tmpfs root,
// to reproduce the host's merged-/usr layout (/bin -> usr/bin) without a
// mount.
const TypeSymlink = "agentrun-symlink"

// TypeCopy is the agentrun mount type that copies the regular file at the
// source, which must be readable by all, to the destination of a tmpfs
// root before the root turns read-only. The compiler uses it for small
// /etc files instead of binds: a copy costs a fraction of a mount to make
// and to tear down, and the sandbox gets a snapshot taken at spawn time.
const TypeCopy = "agentrun-copy"

// TypeRootTemplate is the agentrun mount type that binds a root template
// (Source) read-only as the root. It is the first mount, Destination "/",
// and its "lock=PATH" option names the template's lock file.
const TypeRootTemplate = "agentrun-root-template"

// AnnotationRootfs set to "tmpfs" means Spec.Root is absent and the
// runtime assembles a fresh tmpfs root from Spec.Mounts.
const AnnotationRootfs = "run.agentrun.rootfs"

// AnnotationTemplateCopies lists, comma-separated, the destinations of
// read-only binds of regular files that a root template may hold as
// copies: files too big to copy into every fresh root, small enough to
// copy into a template once. Without a template they stay binds; binds
// the caller asked for are never listed, and binds not listed stay binds.
const AnnotationTemplateCopies = "run.agentrun.template-copies"
