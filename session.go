package agentrun

import (
	"errors"
	"io"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SessionOptions are the inputs of NewSession besides the Policy.
type SessionOptions struct {
	// Name makes the session findable by other processes of the same user
	// (AttachSession, ListSessions, the agentrun CLI); "" is anonymous.
	Name string
	// Persistent sessions are held by an agentrun process of their own
	// (Runtime), so they outlive the caller; they need a Name. Otherwise
	// the session is tied to the caller: it ends with Close or with the
	// calling process.
	Persistent bool
	// IdleTimeout deletes a persistent session once no client has been
	// connected and nothing has been asked of it for this long; 0 never.
	IdleTimeout time.Duration
	// Runtime is the agentrun binary that holds persistent sessions;
	// "" is "agentrun" in PATH.
	Runtime string
	// Warn receives one-line warnings (clamped rlimits, say).
	Warn func(string)
}

// ExecRequest is one command to run in a session.
type ExecRequest struct {
	// Args is the command, looked up in PATH; Shell, instead, is a command
	// line for /bin/sh -c. Exactly one is given.
	Args  []string
	Shell string
	// Cwd is the working directory, relative to the session's; "" is it.
	Cwd string
	// Env holds KEY=VALUE entries over the session's environment, or the
	// whole environment with ReplaceEnv. An exec never sees another's.
	Env        []string
	ReplaceEnv bool
	// Stdin is the command's input; nil is empty. An *os.File is passed
	// to the command as it is.
	Stdin io.Reader
	// Stdout and Stderr receive the output. For Exec, nil captures it
	// into the result; for StartProcess, nil gives a pipe (Process.Stdout).
	Stdout, Stderr io.Writer
	// Timeout kills the command's process group once it has passed: the
	// result says TimedOut, with exit code 124, and no error.
	Timeout time.Duration
	// MaxOutput caps the bytes kept (or passed on) per stream; the
	// result says which stream was cut. 0 is no cap.
	MaxOutput int64
	// WaitDelay bounds the wait for the output once the command has
	// ended, for background children that keep it open (0: 250ms;
	// negative: no bound).
	WaitDelay time.Duration
	// TTY runs the command on a terminal of the sandbox's own, of this
	// size, as its controlling terminal: job control works, and Stdout
	// gets everything it writes (Stderr stays nil). Process.Resize
	// changes the size.
	TTY *Winsize
}

// Winsize is a terminal's size in characters.
type Winsize struct{ Rows, Cols uint16 }

// ExecResult is how a command in a session ended. A non-zero exit is a
// result, not an error.
type ExecResult struct {
	// ExitCode is the command's status, 128+Signal when a signal ended
	// it, 124 when its timeout did.
	ExitCode int
	Signal   int
	// Stdout and Stderr hold the output that Exec captured.
	Stdout, Stderr                   []byte
	StdoutTruncated, StderrTruncated bool
	// TimedOut: the request's Timeout ended it. Aborted: the caller's
	// context did (Exec then also returns the context's error).
	TimedOut, Aborted bool
	Duration          time.Duration
}

// SessionState is where a session is in its life.
type SessionState string

// The states of a session.
const (
	SessionStarting SessionState = "starting"
	SessionRunning  SessionState = "running"
	SessionStopped  SessionState = "stopped"
	SessionFailed   SessionState = "failed"
)

// SessionInfo describes a named session of the caller's.
type SessionInfo struct {
	Name    string       `json:"name"`
	State   SessionState `json:"state"`
	Pid     int          `json:"pid,omitempty"`
	Created time.Time    `json:"created"`
	Socket  string       `json:"socket,omitempty"`
}

// SessionEvent is something a session reports: a denied call
// ("violation": Action is the call, Target the argument that decided,
// Suggestion what would allow it), the end of a process ("exit"), or the
// session's end ("state", Status).
type SessionEvent struct {
	Kind       string
	Action     string
	Target     string
	Suggestion string
	Process    string
	Result     *ExecResult
	Status     SessionState
}

// sessionCommand stands in the Spec of a session for the command it does
// not have: a session runs one process per exec, never the Spec's own.
var sessionCommand = []string{"/bin/sh"}

// CompileSession turns a Policy into the Spec of a session: as Compile,
// without a command; a timeout is refused, since each command in a
// session has its own.
func CompileSession(p *Policy, h *HostInfo) (*specs.Spec, error) {
	if p.Timeout != 0 {
		return nil, policyErr("a session has no timeout of its own: give each command one (ExecRequest.Timeout, agentrun exec --timeout)")
	}
	q := *p
	q.Command = sessionCommand
	return Compile(&q, h)
}

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Size is how many sessions are kept ready (default 2).
	Size int
	// Warn receives one-line warnings of the builds.
	Warn func(string)
}

// ErrSessionClosed is the error of calls on a session that has ended.
var ErrSessionClosed = errors.New("agentrun: the session has ended")
