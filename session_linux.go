//go:build linux

package agentrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/probe"
	"github.com/agentrun/agentrun/session"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Session is a sandbox that lives across many commands: files in /tmp
// and the workspace, and processes started in the background, stay
// until it is closed. Each command gets its own environment, working
// directory and process group; limits bind the whole session. It is one
// trust domain: every command runs as the same user with the same files.
// Its methods may be called from any goroutine.
type Session struct {
	name   string
	policy *Policy
	cwd    string
	b      backend
	// background: Close returns at once and the session is deleted in
	// the background (a session taken from a Pool).
	background bool

	closeOnce sync.Once
	closeErr  error
}

// backend is a session served in this process (session.Host) or through
// its socket (session.Client).
type backend interface {
	exec(ctx context.Context, r session.ExecRequest) (proc, error)
	resolve(ctx context.Context, p string, write bool) (string, error)
	kill(sig syscall.Signal) error
	subscribe(fn func(session.Event)) (cancel func(), err error)
	state(ctx context.Context) (session.StateInfo, error)
	done() <-chan struct{}
	// failed says the session ended without a Close.
	failed() bool
	delete() error
	detach() error
}

// proc is a process of either backend.
type proc interface {
	ID() string
	Pid() int
	Done() <-chan struct{}
	Wait() session.ExitInfo
	Signal(sig syscall.Signal, group bool) error
	Resize(session.Winsize) error
	Cancel()
}

// NewSession starts a session from a Policy (its Command is not run). A
// session that cannot be built returns a *SetupError; a persistent one
// the runtime's error.
func NewSession(ctx context.Context, p *Policy, o SessionOptions) (*Session, error) {
	if o.Persistent {
		return newPersistent(ctx, p, o)
	}
	spec, err := compileSession(p)
	if err != nil {
		return nil, err
	}
	return openLocal(ctx, p, spec, o)
}

// compileSession compiles p for a session on this host.
func compileSession(p *Policy) (*specs.Spec, error) {
	host, err := NewHostInfo(p)
	if err != nil {
		return nil, &SetupError{Step: "workspace", Err: err}
	}
	spec, err := CompileSession(p, host)
	if err != nil {
		return nil, &SetupError{Step: "policy", Err: err}
	}
	return spec, nil
}

// openLocal starts a session of spec served by this process.
func openLocal(ctx context.Context, p *Policy, spec *specs.Spec, o SessionOptions) (*Session, error) {
	h, err := session.Open(ctx, session.Config{
		ID: o.Name, Spec: spec, Listen: o.Name != "",
		Warn: o.Warn, UsernsBlocker: probe.UsernsBlockerFor,
	})
	if err != nil {
		return nil, setupError(err)
	}
	return &Session{name: o.Name, policy: p, cwd: h.WorkingDir(), b: localBackend{h}}, nil
}

// newPersistent asks the agentrun runtime to create the session
// (agentrun create --policy -), then attaches to it.
func newPersistent(ctx context.Context, p *Policy, o SessionOptions) (*Session, error) {
	if o.Name == "" {
		return nil, errors.New("agentrun: a persistent session needs a name")
	}
	rt := o.Runtime
	if rt == "" {
		rt = "agentrun"
	}
	pj, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	args := []string{"create", "--policy", "-", "--json"}
	if o.IdleTimeout > 0 {
		args = append(args, "--idle-timeout", o.IdleTimeout.String())
	} else {
		args = append(args, "--idle-timeout", "0")
	}
	cmd := exec.CommandContext(ctx, rt, append(args, o.Name)...)
	cmd.Stdin = bytes.NewReader(pj)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := bytes.TrimSpace(stderr.Bytes())
		if len(msg) == 0 {
			msg = []byte(err.Error())
		}
		return nil, &SetupError{Step: "create", Err: errors.New(string(msg))}
	}
	var ready session.Ready
	if err := json.Unmarshal(out, &ready); err != nil || !ready.OK {
		return nil, &SetupError{Step: "create", Err: fmt.Errorf("unexpected reply from %s create: %q", rt, out)}
	}
	s, err := attach(ctx, o.Name, ready.Socket)
	if err != nil {
		// Nobody would know of it: it goes, rather than idle for ever.
		_ = exec.Command(rt, "delete", "-f", o.Name).Run()
		return nil, err
	}
	s.policy = p
	return s, nil
}

// AttachSession connects to the named session of the caller's, made by
// this or another process.
func AttachSession(ctx context.Context, name string) (*Session, error) {
	r, err := lifecycle.Load(lifecycle.StateDir(os.Geteuid()), name)
	if err != nil {
		return nil, err
	}
	if !r.Serve || r.Socket == "" {
		return nil, fmt.Errorf("agentrun: %q is not a session that can be attached to", name)
	}
	if r.State == lifecycle.Stopped {
		return nil, fmt.Errorf("%w: %q", ErrSessionClosed, name)
	}
	return attach(ctx, name, r.Socket)
}

func attach(ctx context.Context, name, socket string) (*Session, error) {
	c, err := session.Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	st, err := c.State(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	// Subscribed, so that the session's end, and how it ended, is seen.
	if _, err := c.Subscribe(ctx, func(session.Event) {}); err != nil {
		c.Close()
		return nil, err
	}
	return &Session{name: name, cwd: st.Cwd, b: remoteBackend{c}}, nil
}

// ListSessions lists the caller's named sessions, ended ones included
// until they are swept.
func ListSessions() ([]SessionInfo, error) {
	dir := lifecycle.StateDir(os.Geteuid())
	_, _ = lifecycle.Sweep(dir)
	recs, err := lifecycle.List(dir)
	var out []SessionInfo
	for _, r := range recs {
		if !r.Serve {
			continue
		}
		si := SessionInfo{Name: r.ID, Created: r.Created, Socket: r.Socket}
		switch r.State {
		case lifecycle.Creating, lifecycle.Created:
			si.State = SessionStarting
		case lifecycle.Running:
			si.State = SessionRunning
		default:
			si.State = SessionStopped
		}
		if r.Init != nil {
			si.Pid = r.Init.PID
		}
		out = append(out, si)
	}
	return out, err
}

// Name is the session's name, "" for an anonymous one.
func (s *Session) Name() string { return s.name }

// Policy is the policy the session was made from; nil for a session
// attached to by name.
func (s *Session) Policy() *Policy { return s.policy }

// WorkingDir is the working directory of a command that names none.
func (s *Session) WorkingDir() string { return s.cwd }

// Done is closed once the session has ended (or, for an attached session,
// its connection).
func (s *Session) Done() <-chan struct{} { return s.b.done() }

// Alive says whether the session still runs.
func (s *Session) Alive() bool {
	select {
	case <-s.b.done():
		return false
	default:
		return true
	}
}

// State is where the session is in its life.
func (s *Session) State() SessionState {
	if !s.Alive() {
		if s.b.failed() {
			return SessionFailed
		}
		return SessionStopped
	}
	return SessionRunning
}

// Exec runs a command in the session and waits for it, its output
// captured unless the request directs it elsewhere. Cancelling ctx kills
// the command's process group: the result says Aborted, and the error
// wraps ctx's.
func (s *Session) Exec(ctx context.Context, r ExecRequest) (*ExecResult, error) {
	var out, errb *capBuffer
	if r.Stdout == nil {
		out = &capBuffer{}
		r.Stdout = out
	}
	if r.Stderr == nil && r.TTY == nil {
		errb = &capBuffer{}
		r.Stderr = errb
	}
	p, err := s.b.exec(ctx, sessionRequest(&r))
	if err != nil {
		return nil, s.execErr(err)
	}
	info := p.Wait()
	res := execResult(info)
	if out != nil {
		res.Stdout = out.Bytes()
	}
	if errb != nil {
		res.Stderr = errb.Bytes()
	}
	if info.Error != "" && !info.Aborted {
		return res, fmt.Errorf("%w: %s", ErrSessionClosed, info.Error)
	}
	if res.Aborted {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("agentrun: exec aborted: %w", err)
		}
	}
	return res, nil
}

// capBuffer is a buffer safe for the two streams of one writer.
type capBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *capBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.b.Bytes())
}

func sessionRequest(r *ExecRequest) session.ExecRequest {
	sr := session.ExecRequest{
		Args: r.Args, Shell: r.Shell, Cwd: r.Cwd, Env: r.Env, ReplaceEnv: r.ReplaceEnv,
		Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr,
		Timeout: r.Timeout, MaxOutput: r.MaxOutput, WaitDelay: r.WaitDelay,
	}
	if r.TTY != nil {
		sr.TTY = &session.Winsize{Rows: r.TTY.Rows, Cols: r.TTY.Cols}
		// A terminal's stdio is copied to and from it, never passed.
		if f, ok := sr.Stdin.(*os.File); ok {
			sr.Stdin = struct{ io.Reader }{f}
		}
		if f, ok := sr.Stdout.(*os.File); ok {
			sr.Stdout = struct{ io.Writer }{f}
		}
	}
	return sr
}

func execResult(info session.ExitInfo) *ExecResult {
	return &ExecResult{
		ExitCode: info.Code, Signal: info.Signal,
		StdoutTruncated: info.StdoutTruncated, StderrTruncated: info.StderrTruncated,
		TimedOut: info.TimedOut, Aborted: info.Aborted,
		Duration: time.Duration(info.DurationMS * float64(time.Millisecond)),
	}
}

// execErr maps the session package's errors onto the module's.
func (s *Session) execErr(err error) error {
	var se *session.Error
	switch {
	case errors.Is(err, session.ErrClosed):
		return fmt.Errorf("%w: %v", ErrSessionClosed, err)
	case errors.As(err, &se) && se.Kind == session.KindUnavailable:
		return fmt.Errorf("%w: %s", ErrSessionClosed, se.Message)
	}
	return err
}

// Process is a command started in a session that runs beside the
// caller: a server, a language server, an MCP server on stdio.
type Process struct {
	p                     proc
	stdin                 io.WriteCloser
	stdout, stderr        io.ReadCloser
	closeOnce             sync.Once
	parentEnds, childEnds []*os.File
}

// StartProcess starts a command in the session and returns once it
// runs. Streams the request leaves nil are pipes (Process.Stdin, Stdout,
// Stderr). Cancelling ctx kills its process group; the Timeout does too.
func (s *Session) StartProcess(ctx context.Context, r ExecRequest) (_ *Process, err error) {
	pr := &Process{}
	defer func() {
		for _, f := range pr.childEnds {
			f.Close()
		}
		if err != nil {
			for _, f := range pr.parentEnds {
				f.Close()
			}
		}
	}()
	pipe := func() (*os.File, *os.File, error) {
		rf, wf, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		return rf, wf, nil
	}
	if r.Stdin == nil {
		rf, wf, err := pipe()
		if err != nil {
			return nil, err
		}
		r.Stdin, pr.stdin = rf, wf
		pr.childEnds, pr.parentEnds = append(pr.childEnds, rf), append(pr.parentEnds, wf)
	}
	if r.Stdout == nil {
		rf, wf, err := pipe()
		if err != nil {
			return nil, err
		}
		r.Stdout, pr.stdout = wf, rf
		pr.childEnds, pr.parentEnds = append(pr.childEnds, wf), append(pr.parentEnds, rf)
	}
	if r.Stderr == nil && r.TTY == nil {
		rf, wf, err := pipe()
		if err != nil {
			return nil, err
		}
		r.Stderr, pr.stderr = wf, rf
		pr.childEnds, pr.parentEnds = append(pr.childEnds, wf), append(pr.parentEnds, rf)
	}
	var ends []*os.File
	if r.TTY != nil {
		// The session copies between these pipes and the terminal, so
		// they are kept open until the process has ended and its output
		// is through: then the caller's Stdout reads its end.
		if f, ok := r.Stdin.(*os.File); ok {
			r.Stdin = struct{ io.Reader }{f}
		}
		if f, ok := r.Stdout.(*os.File); ok {
			r.Stdout = struct{ io.Writer }{f}
		}
		ends, pr.childEnds = pr.childEnds, nil
	}
	p, err := s.b.exec(ctx, sessionRequest(&r))
	if err != nil {
		for _, f := range ends {
			f.Close()
		}
		return nil, s.execErr(err)
	}
	pr.p = p
	if len(ends) > 0 {
		go func() {
			<-p.Done()
			for _, f := range ends {
				f.Close()
			}
		}()
	}
	return pr, nil
}

// ID names the process in its session.
func (p *Process) ID() string { return p.p.ID() }

// Pid is its pid in the session's PID namespace.
func (p *Process) Pid() int { return p.p.Pid() }

// Stdin is the pipe to its input, nil when the request gave one.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout is the pipe from its output, nil when the request gave one.
func (p *Process) Stdout() io.ReadCloser { return p.stdout }

// Stderr is the pipe from its error output, nil when the request gave one.
func (p *Process) Stderr() io.ReadCloser { return p.stderr }

// Signal sends sig to the process; os.ErrProcessDone once it has ended.
func (p *Process) Signal(sig syscall.Signal) error { return p.p.Signal(sig, false) }

// Resize sets the size of the process's terminal (ExecRequest.TTY).
func (p *Process) Resize(ws Winsize) error {
	return p.p.Resize(session.Winsize{Rows: ws.Rows, Cols: ws.Cols})
}

// SignalGroup sends sig to the process's group.
func (p *Process) SignalGroup(sig syscall.Signal) error { return p.p.Signal(sig, true) }

// Done is closed once it has ended.
func (p *Process) Done() <-chan struct{} { return p.p.Done() }

// Wait waits for it to end. Output not read from its pipes stays there.
func (p *Process) Wait() (*ExecResult, error) {
	info := p.p.Wait()
	res := execResult(info)
	if info.Error != "" {
		return res, fmt.Errorf("%w: %s", ErrSessionClosed, info.Error)
	}
	return res, nil
}

// Close kills the process's group and closes this side of its pipes.
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		// The pipes first: a remote session's client may be blocked
		// writing output nobody reads, and Cancel needs its reply.
		for _, f := range p.parentEnds {
			f.Close()
		}
		select {
		case <-p.p.Done():
		default:
			p.p.Cancel()
		}
	})
	return nil
}

// ResolvePath maps a path in the session to the host path that holds it,
// so that the caller can read and write it directly. A path outside every
// host bind of the policy, or one that a symlink or ".." leads out of its
// bind, is an error that wraps ErrPolicy (and a *session.PathError). The
// check holds at the time of the call: see session.Resolve.
func (s *Session) ResolvePath(p string) (string, error) { return s.resolve(p, false) }

// ResolveWritePath is ResolvePath that also refuses read-only binds.
func (s *Session) ResolveWritePath(p string) (string, error) { return s.resolve(p, true) }

func (s *Session) resolve(p string, write bool) (string, error) {
	hp, err := s.b.resolve(context.Background(), p, write)
	var pe *session.PathError
	if errors.As(err, &pe) {
		return "", fmt.Errorf("%w: %w", ErrPolicy, pe)
	}
	if err != nil {
		return "", s.execErr(err)
	}
	return hp, nil
}

// Signal sends sig to every process of the session.
func (s *Session) Signal(sig syscall.Signal) error { return s.execErr(s.b.kill(sig)) }

// Subscribe delivers the session's events to fn, in order, until cancel
// is called or the session ends. fn must not block for long.
func (s *Session) Subscribe(fn func(SessionEvent)) (cancel func(), err error) {
	return s.b.subscribe(func(e session.Event) {
		ev := SessionEvent{Kind: e.Kind, Action: e.Action, Target: e.Target, Suggestion: e.Suggestion, Process: e.Proc, Status: SessionState(e.Status)}
		if e.Exit != nil {
			ev.Result = execResult(*e.Exit)
		}
		fn(ev)
	})
}

// Close ends the session: every process in it, its sandbox, and what it
// held. A persistent or attached session is deleted too (Detach leaves it
// running). It may be called more than once.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		if s.background {
			go s.b.delete()
			return
		}
		s.closeErr = s.b.delete()
	})
	return s.closeErr
}

// Detach lets go of a session without ending it: a persistent session
// runs on, to be attached to by name. A tied session has nothing to run
// on in, so Detach on it is Close.
func (s *Session) Detach() error {
	s.closeOnce.Do(func() { s.closeErr = s.b.detach() })
	return s.closeErr
}

// localBackend serves the session in this process.
type localBackend struct{ h *session.Host }

func (l localBackend) exec(ctx context.Context, r session.ExecRequest) (proc, error) {
	return l.h.Exec(ctx, r)
}
func (l localBackend) resolve(_ context.Context, p string, write bool) (string, error) {
	return l.h.Resolve(p, write)
}
func (l localBackend) kill(sig syscall.Signal) error { return l.h.SignalAll(sig) }
func (l localBackend) subscribe(fn func(session.Event)) (func(), error) {
	return l.h.Subscribe(fn), nil
}
func (l localBackend) state(context.Context) (session.StateInfo, error) { return l.h.State(), nil }
func (l localBackend) done() <-chan struct{}                            { return l.h.Done() }
func (l localBackend) failed() bool                                     { return l.h.Failed() }
func (l localBackend) delete() error                                    { return l.h.Close() }
func (l localBackend) detach() error                                    { return l.h.Close() }

// remoteBackend reaches the session through its socket.
type remoteBackend struct{ c *session.Client }

func (r remoteBackend) exec(ctx context.Context, req session.ExecRequest) (proc, error) {
	return r.c.Exec(ctx, req)
}
func (r remoteBackend) resolve(ctx context.Context, p string, write bool) (string, error) {
	return r.c.Resolve(ctx, p, write)
}
func (r remoteBackend) kill(sig syscall.Signal) error { return r.c.Kill(context.Background(), sig) }
func (r remoteBackend) subscribe(fn func(session.Event)) (func(), error) {
	return r.c.Subscribe(context.Background(), fn)
}
func (r remoteBackend) state(ctx context.Context) (session.StateInfo, error) { return r.c.State(ctx) }
func (r remoteBackend) done() <-chan struct{}                                { return r.c.Done() }

// failed is the session\'s "state" event as this connection saw it.
func (r remoteBackend) failed() bool { return r.c.EndStatus() == "failed" }
func (r remoteBackend) delete() error {
	err := r.c.Delete(context.Background())
	r.c.Close()
	return err
}
func (r remoteBackend) detach() error { return r.c.Close() }
