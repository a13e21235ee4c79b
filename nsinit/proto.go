// Package nsinit starts a sandbox from an OCI Spec. The parent side clones
// a re-exec of the current binary into new namespaces, writes its id maps,
// prepares what only the parent can (idmapped mounts) and then talks to the
// child over a SOCK_SEQPACKET pair. The child side (Init) is PID 1 of the
// sandbox: it builds the root, drops every privilege, starts the command,
// forwards signals, reaps zombies and reports how the command ended.
package nsinit

import specs "github.com/opencontainers/runtime-spec/specs-go"

// InitArg0 is argv[0] of the re-exec'd child. The CLI checks it first thing
// in main so the init path runs before any flag parsing.
const InitArg0 = "agentrun-init"

// syncFD is the child's end of the sync socket; prepared mount fds follow.
const syncFD = 3

// The config goes out as a header message, "config N", then N bytes of
// JSON in messages of at most configChunk bytes: one SOCK_SEQPACKET
// message must fit the socket's send buffer (about 208 KiB by default, the
// most an unprivileged caller may set), and a command line alone may be
// 2 MiB.
const (
	configChunk = 64 << 10
	maxConfig   = 64 << 20
)

// config is what the parent sends first.
type config struct {
	Spec *specs.Spec `json:"spec"`
	// Prepared maps a Spec.Mounts index to the child fd of a detached mount
	// that the parent created (idmapped binds), or of the root template's
	// lock file, which the parent opened and locked.
	Prepared map[int]int `json:"prepared,omitempty"`
	// Seccomp is a compiled filter (struct sock_filter array) that the init
	// loads right before it starts the command; SeccompFlags are the
	// kernel's SECCOMP_FILTER_FLAG_* bits.
	Seccomp      []byte `json:"seccomp,omitempty"`
	SeccompFlags uint32 `json:"seccomp_flags,omitempty"`
}

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
	// fd is a descriptor received with the report, or -1.
	fd int
}

// StepError is a setup failure in the parent or the child, naming the step.
type StepError struct {
	Step string
	Msg  string
}

func (e *StepError) Error() string { return e.Step + ": " + e.Msg }
