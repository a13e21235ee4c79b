// Package nsinit starts a sandbox from an OCI Spec with the C init
// (internal/cinit). The parent side compiles the seccomp filter, prepares
// what only the parent can (idmapped binds, the root template's lock),
// encodes the Spec as the init's plan, clones the init into its new
// namespaces, writes its id maps, places it in its cgroup and releases it
// over a SOCK_SEQPACKET pair. The init is PID 1 of the sandbox: it builds
// the root, drops every privilege, starts the command, forwards signals,
// reaps zombies and reports how the command ended. Process is the parent's
// handle on a started sandbox: signal, kill, wait, violations. The package
// also starts the userns holders the idmapped binds need, forwards the
// caller's signals (Forwarder), and adopts an init the CLI's constructor
// started from a cached plan (prestart). In serve mode (Config.Serve) the
// init has no command of its own: once confined, it runs a process per
// Process.Exec request sent over the same socket, and lives until its
// parent lets go.
package nsinit

import "golang.org/x/sys/unix"

// syncFD is the child's end of the sync socket; prepared mount fds follow.
const syncFD = 3

// Report types sent by the child.
const (
	repStarted = "started"
	repError   = "error"
	repExit    = "exit"
	// repListener carries the seccomp user-notification fd (SCM_RIGHTS).
	repListener = "seccomp-listener"
)

// report is a message from the child.
type report struct {
	Type  string `json:"type"`
	Step  string `json:"step,omitempty"`
	Error string `json:"error,omitempty"`
	Pid   int    `json:"pid,omitempty"`
	// Exit code (0-255) or the signal that killed the command.
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
	// ID is a serving init's echo of a request's id; Errno its error.
	ID    uint64 `json:"id,omitempty"`
	Errno int    `json:"errno,omitempty"`
	// TTY says an exec-started report's first descriptor is the master
	// of the exec's terminal (its pidfd, if any, is then the second).
	TTY int `json:"tty,omitempty"`
	// fd and fd2 are the descriptors received with the report, or -1.
	fd, fd2 int
}

// closeFDs closes the descriptors the report came with.
func (r *report) closeFDs() {
	for _, fd := range []*int{&r.fd, &r.fd2} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// StepError is a setup failure in the parent or the child, naming the step.
type StepError struct {
	Step string
	Msg  string
}

func (e *StepError) Error() string { return e.Step + ": " + e.Msg }
