// Package seccomp builds, compiles, loads and reports on seccomp filters for
// agentrun sandboxes.
//
// The OCI runtime-spec type specs.LinuxSeccomp is the one representation of a
// profile: DefaultProfile returns agentrun's allowlist for agent workloads,
// ParseProfile reads OCI and Docker-format JSON into the same type, and
// NotifyOnDeny rewrites a profile so that its EPERM denials are reported
// through the seccomp user-notification mechanism.
//
// The work is split by process and by cost:
//
//   - Compile runs in the parent. It uses libseccomp (cgo) to turn a profile
//     into a classic BPF program and returns the raw sock_filter bytes in a
//     Program. For a single-architecture profile it also writes a smaller
//     program itself (compact.go: the default profile's is about a third of
//     libseccomp's, and loads in half the time) and uses it only when it
//     decides as libseccomp's does on every syscall number and on argument
//     values around every constant of the rules. Cache keeps compiled
//     programs by profile hash so that repeated spawns with the same profile
//     do not recompile.
//   - The sandbox init (nsinit/internal/cinit) loads the program right
//     before the command is executed: one seccomp(2) call on the bytes it
//     is handed, no libseccomp. Load makes the same call in pure Go, for Go
//     programs that confine themselves or a child.
//   - Notifier runs in the parent. It serves the listener fd that loading
//     a program with SCMP_ACT_NOTIFY rules returns, which the init passes
//     to the parent, answers every notification with EPERM and records an
//     Event per denied call.
//
// Files that need cgo are built with "linux && cgo"; everything else builds on
// every GOOS so that profiles can be parsed and validated anywhere. Off
// Linux, Compile, Load and NewNotifier return ErrUnsupported, and so does
// Compile in a build without cgo.
package seccomp
