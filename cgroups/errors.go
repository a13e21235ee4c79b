package cgroups

import "errors"

// Kinds of "cgroups cannot enforce limits for this caller on this host".
// They are wrapped in an *UnusableError; test with errors.Is.
var (
	// ErrNoCgroupFS means no cgroup filesystem is mounted at all.
	ErrNoCgroupFS = errors.New("cgroups: no cgroup filesystem mounted")
	// ErrNoDelegation means cgroups exist but this caller may not create
	// or populate a cgroup (rootless without a delegated v2 subtree,
	// root-owned v1 hierarchies, a read-only cgroupfs, or a v2 subtree
	// whose processes cannot be moved out of the way).
	ErrNoDelegation = errors.New("cgroups: no delegated cgroup")
	// ErrNoController means a controller needed for a requested limit is
	// not available where agentrun would create its cgroup.
	ErrNoController = errors.New("cgroups: controller unavailable")
)

// ErrUnsupported is returned on operating systems without cgroups.
var ErrUnsupported = errors.New("cgroups: not supported on this operating system")

// UnusableError says that cgroups cannot be used here, and why. Callers
// branch on it: when the user asked for limits it is fatal (print Error(),
// exit 125); when no limit was asked for the sandbox may run without a
// cgroup and report that.
type UnusableError struct {
	// Kind is ErrNoCgroupFS, ErrNoDelegation or ErrNoController.
	Kind error
	// Msg is one line: what is missing and how to get it.
	Msg string
}

func (e *UnusableError) Error() string { return e.Msg }
func (e *UnusableError) Unwrap() error { return e.Kind }

func unusable(kind error, msg string) *UnusableError {
	return &UnusableError{Kind: kind, Msg: msg}
}
