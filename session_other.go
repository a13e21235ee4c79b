//go:build !linux

package agentrun

import (
	"context"
	"io"
	"syscall"
)

// Session is a sandbox that lives across many commands; only Linux has
// them.
type Session struct{}

// Process is a command started in a session.
type Process struct{}

// NewSession returns ErrUnsupported: sessions need Linux.
func NewSession(context.Context, *Policy, SessionOptions) (*Session, error) {
	return nil, ErrUnsupported
}

// AttachSession returns ErrUnsupported: sessions need Linux.
func AttachSession(context.Context, string) (*Session, error) { return nil, ErrUnsupported }

// ListSessions returns ErrUnsupported: sessions need Linux.
func ListSessions() ([]SessionInfo, error) { return nil, ErrUnsupported }

func (*Session) Name() string                                           { return "" }
func (*Session) Policy() *Policy                                        { return nil }
func (*Session) WorkingDir() string                                     { return "" }
func (*Session) Done() <-chan struct{}                                  { c := make(chan struct{}); close(c); return c }
func (*Session) Alive() bool                                            { return false }
func (*Session) State() SessionState                                    { return SessionStopped }
func (*Session) Exec(context.Context, ExecRequest) (*ExecResult, error) { return nil, ErrUnsupported }
func (*Session) StartProcess(context.Context, ExecRequest) (*Process, error) {
	return nil, ErrUnsupported
}
func (*Session) ResolvePath(string) (string, error)      { return "", ErrUnsupported }
func (*Session) ResolveWritePath(string) (string, error) { return "", ErrUnsupported }
func (*Session) Signal(syscall.Signal) error             { return ErrUnsupported }
func (*Session) Subscribe(func(SessionEvent)) (func(), error) {
	return nil, ErrUnsupported
}
func (*Session) Close() error  { return nil }
func (*Session) Detach() error { return nil }

func (*Process) ID() string                       { return "" }
func (*Process) Pid() int                         { return 0 }
func (*Process) Stdin() io.WriteCloser            { return nil }
func (*Process) Stdout() io.ReadCloser            { return nil }
func (*Process) Stderr() io.ReadCloser            { return nil }
func (*Process) Signal(syscall.Signal) error      { return ErrUnsupported }
func (*Process) SignalGroup(syscall.Signal) error { return ErrUnsupported }
func (*Process) Done() <-chan struct{}            { c := make(chan struct{}); close(c); return c }
func (*Process) Wait() (*ExecResult, error)       { return nil, ErrUnsupported }
func (*Process) Close() error                     { return nil }

// Pool keeps sessions of one policy built ahead; only Linux has them.
type Pool struct{}

// NewPool returns ErrUnsupported: sessions need Linux.
func NewPool(context.Context, *Policy, PoolOptions) (*Pool, error) { return nil, ErrUnsupported }

func (*Pool) Take(context.Context) (*Session, error) { return nil, ErrUnsupported }
func (*Pool) Close() error                           { return nil }

func (*Process) Resize(Winsize) error { return ErrUnsupported }
