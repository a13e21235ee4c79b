// Package cgroups owns agentrun's cgroup lifecycle: finding where this host
// keeps its controllers (unified v2, hybrid, or legacy v1), creating one
// cgroup per sandbox under a parent of agentrun's own, applying the memory,
// pids and CPU limits of a specs.LinuxResources, placing the sandbox's first
// process, killing the whole tree, reading what the kernel accounted (OOM
// kills, peaks, CPU time), and removing every directory it made, including
// leftovers of a runtime that died without cleaning up (Sweep).
//
// Placement follows the mode:
//
//   - unified v2: root uses <cgroup2 mount>/agentrun/<id>; a rootless caller
//     uses <its own cgroup>/agentrun/<id> when that cgroup is delegated to it
//     (it can write cgroup.procs and cgroup.subtree_control there). The
//     sandbox's first process is placed atomically with clone3
//     CLONE_INTO_CGROUP through Cgroup.FD, or with Cgroup.Add as a fallback.
//   - unified v2, rootless, own cgroup not delegated, but a systemd user
//     manager reachable ($XDG_RUNTIME_DIR/systemd/private, else the session
//     bus): Create asks it over D-Bus (internal/sdbus) for a transient scope
//     agentrun-<id>.scope with Delegate=yes, kept populated by a holder
//     process (Options.ScopeHolder) in <scope>/.hold, and the sandbox's
//     cgroup is <scope>/<id>. The caller cannot write the cgroups above the
//     scope, so the manager also places the init (Add →
//     AttachProcessesToUnit); Delete stops the scope. See scope_linux.go.
//   - hybrid and legacy v1: <each v1 hierarchy>/<caller's cgroup>/agentrun/<id>,
//     so the sandbox stays inside whatever limits already bind the caller;
//     the process is placed with Cgroup.Add before it runs user code.
//
// Nothing here falls back silently: when limits cannot be enforced the error
// is an *UnusableError whose message says, in one line, what is missing and
// how to get it. The package holds no package-level mutable state; a Manager
// is immutable after NewManager and safe for concurrent use.
//
// The file work is done directly on cgroupfs rather than through
// containerd/cgroups' cgroup1/cgroup2 managers: those pull protobuf, eBPF,
// D-Bus and logrus into every process (roughly doubling the start-up time of
// a binary that starts on every spawn) and do not handle the v2
// no-internal-process rule for delegated subtrees. Of the containerd module
// only the root package is used, to parse /proc/self/cgroup.
package cgroups
