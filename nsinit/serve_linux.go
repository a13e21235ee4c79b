//go:build linux

package nsinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrSessionGone is the error of every exec, signal and pending exit of a
// serving sandbox whose init has ended.
var ErrSessionGone = errors.New("nsinit: the sandbox's init is gone")

// ErrNotServing is returned by Exec and SignalAll on a sandbox that was
// not created with Config.Serve, or not started yet.
var ErrNotServing = errors.New("nsinit: the sandbox does not serve execs (Config.Serve) or is not started")

// Reply types of a serving init.
const (
	repExecStarted = "exec-started"
	repExecError   = "exec-error"
	repExecExit    = "exec-exit"
	repAck         = "ack"
)

// ExecSpec is one process to start in a serving sandbox.
type ExecSpec struct {
	// Args is the command; Args[0] is looked up in Path unless it has a
	// slash.
	Args []string
	// Env is the whole environment: nothing of the sandbox's or of
	// earlier execs is added.
	Env []string
	// Cwd is the working directory; "" is the Spec's.
	Cwd string
	// Path is the PATH Args[0] is looked up in; "" is PATH in Env.
	Path string
	// Stdin, Stdout and Stderr become the process's fds 0-2; nil is
	// /dev/null. The process holds no other descriptor.
	Stdin, Stdout, Stderr *os.File
	// TTY runs the process on a new pseudo-terminal of the sandbox's own
	// devpts, as its controlling terminal and fds 0-2 (Stdin, Stdout and
	// Stderr must be nil); Child.TTY is its master.
	TTY *Winsize
}

// Winsize is a terminal's size; zero leaves the kernel's default.
type Winsize struct{ Rows, Cols uint16 }

// ExecError is an exec the init could not start (a cwd that does not
// exist, a malformed request): the step that failed and why.
type ExecError struct {
	Step  string
	Errno unix.Errno
	Msg   string
}

func (e *ExecError) Error() string { return "exec: " + e.Step + ": " + e.Msg }

// Unwrap returns the errno, so that errors.Is(err, unix.ENOENT) works.
func (e *ExecError) Unwrap() error { return e.Errno }

// Child is a process started by Exec.
type Child struct {
	s     *server
	id    uint64
	pid   int
	pidfd *os.File
	tty   *os.File
	done  chan struct{}
	exit  Exit
	err   error
}

// Pid is the child's pid in the sandbox's PID namespace.
func (c *Child) Pid() int { return c.pid }

// Pidfd is a pidfd of the child on the host, nil where the kernel made
// none. It is closed once the child has been reaped.
func (c *Child) Pidfd() *os.File { return c.pidfd }

// TTY is the master of the child's terminal (ExecSpec.TTY), nil without
// one; the caller owns it and closes it.
func (c *Child) TTY() *os.File { return c.tty }

// Done is closed once the child has ended, or the sandbox has.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exit waits for the child to end and says how: the exit code, or the
// signal with Code 128+signal. The error is ErrSessionGone (wrapped) when
// the sandbox ended first.
func (c *Child) Exit() (Exit, error) {
	<-c.done
	return c.exit, c.err
}

// Signal sends sig to the child, or with group to its process group,
// while the child has not been reaped (its pid cannot be reused before
// that); afterwards it returns os.ErrProcessDone. Background processes
// of an ended child are out of its reach (SignalAll reaches them).
func (c *Child) Signal(sig syscall.Signal, group bool) error {
	r := request{typ: reqSignal, target: c.id, sig: int32(sig)}
	if group {
		r.flags = sigGroup
	}
	return c.s.ack(r)
}

// server is the parent's side of a serving init: requests go out on the
// sync socket, and one goroutine (demux) reads every reply and routes it
// by request id. It never blocks on a caller, since the init blocks on a
// full socket and would stall the whole sandbox.
type server struct {
	p    *Process
	done chan struct{} // closed once demux has ended

	mu    sync.Mutex
	next  uint64
	calls map[uint64]*call
	gone  bool
}

// call is one request waiting for its reply; an exec's stays until its
// exit is reported.
type call struct {
	reply chan report // one reply; a closed channel means the init is gone
	child *Child
}

func newServer(p *Process) *server {
	return &server{p: p, done: make(chan struct{}), calls: map[uint64]*call{}}
}

// register adds a call with a fresh id, or fails once the init is gone.
func (s *server) register(c *call) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return 0, ErrSessionGone
	}
	s.next++
	s.calls[s.next] = c
	if c.child != nil {
		c.child.id = s.next
	}
	return s.next, nil
}

func (s *server) drop(id uint64) {
	s.mu.Lock()
	delete(s.calls, id)
	s.mu.Unlock()
}

// send writes one request with its fds.
func (s *server) send(b []byte, fds []int) error {
	raw, err := s.p.sock.SyscallConn()
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	var serr error
	if err := raw.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, nil, unix.MSG_NOSIGNAL)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil {
		return err
	}
	if errors.Is(serr, unix.EPIPE) || errors.Is(serr, unix.ECONNRESET) {
		return ErrSessionGone
	}
	return serr
}

// demux reads the init's replies until its socket closes.
func (s *server) demux() {
	defer close(s.done)
	for {
		r, err := s.p.read()
		if errors.Is(err, errBadReport) {
			continue
		}
		if err != nil {
			s.fail()
			return
		}
		s.route(r)
	}
}

func (s *server) route(r report) {
	s.mu.Lock()
	c := s.calls[r.ID]
	switch {
	case c == nil:
	case r.Type == repExecExit:
		delete(s.calls, r.ID)
	case r.Type == repExecError || r.Type == repAck:
		delete(s.calls, r.ID)
	}
	s.mu.Unlock()
	if c == nil {
		r.closeFDs()
		return
	}
	switch r.Type {
	case repExecStarted:
		if c.child != nil {
			c.child.pid = r.Pid
			pidfd := &r.fd
			if r.TTY != 0 && r.fd >= 0 {
				// Non-blocking, so that the File polls and takes deadlines.
				_ = unix.SetNonblock(r.fd, true)
				c.child.tty = os.NewFile(uintptr(r.fd), "pty-master")
				r.fd, pidfd = -1, &r.fd2
			}
			if *pidfd >= 0 {
				c.child.pidfd = os.NewFile(uintptr(*pidfd), "pidfd")
				*pidfd = -1
			}
		}
		deliver(c, r)
	case repExecExit:
		if ch := c.child; ch != nil {
			ch.exit = Exit{Code: r.Code}
			if r.Signal != 0 {
				ch.exit = Exit{Code: 128 + r.Signal, Signal: r.Signal}
			}
			if ch.pidfd != nil {
				ch.pidfd.Close()
			}
			close(ch.done)
		}
	default:
		deliver(c, r)
	}
	r.closeFDs()
}

// deliver hands a call its first reply; a second one (which a correct
// init never sends) is dropped rather than block the demux.
func deliver(c *call, r report) {
	select {
	case c.reply <- r:
	default:
	}
}

// fail ends every call: the init is gone.
func (s *server) fail() {
	s.mu.Lock()
	s.gone = true
	calls := s.calls
	s.calls = nil
	s.mu.Unlock()
	for _, c := range calls {
		// A child still in calls has not been reported as ended.
		if ch := c.child; ch != nil {
			ch.err = ErrSessionGone
			if ch.pidfd != nil {
				ch.pidfd.Close()
			}
			close(ch.done)
		}
		close(c.reply)
	}
}

// roundTrip sends r and returns its first reply.
func (s *server) roundTrip(r request, c *call, files []*os.File) (report, error) {
	id, err := s.register(c)
	if err != nil {
		return report{}, err
	}
	r.id = id
	b, err := encodeRequest(r)
	if err != nil {
		s.drop(id)
		return report{}, err
	}
	// Fd makes each file blocking, as a process's stdio must be (a
	// program writing to a non-blocking pipe fails with EAGAIN). The
	// mode belongs to the open file, so a caller's copy turns blocking
	// too, as with os/exec.
	fds := make([]int, 0, len(files))
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	err = s.send(b, fds)
	runtime.KeepAlive(files)
	if err != nil {
		s.drop(id)
		return report{}, err
	}
	rep, ok := <-c.reply
	if !ok {
		return report{}, ErrSessionGone
	}
	return rep, nil
}

// ack sends a signal request and turns its reply into an error.
func (s *server) ack(r request) error {
	rep, err := s.roundTrip(r, &call{reply: make(chan report, 1)}, nil)
	switch {
	case err != nil:
		return fmt.Errorf("nsinit: signal: %w", err)
	case rep.Type == repExecError:
		return fmt.Errorf("nsinit: signal: %w", &ExecError{Step: rep.Step, Errno: unix.Errno(rep.Errno), Msg: rep.Error})
	case rep.Errno == int(unix.ESRCH):
		return os.ErrProcessDone
	case rep.Errno != 0:
		return fmt.Errorf("nsinit: signal: %w", unix.Errno(rep.Errno))
	}
	return nil
}

// Exec starts a process in a serving sandbox (Config.Serve) and returns
// once it runs, or with an *ExecError when the init could not start it.
// It holds the sandbox's credentials, capabilities, filter, cgroup and
// namespaces, in a session and process group of its own. A command that
// is not found or not executable is started all the same and exits 127
// or 126, as in a shell.
func (p *Process) Exec(x ExecSpec) (*Child, error) {
	s := p.serve
	if s == nil || !p.serving.Load() {
		return nil, ErrNotServing
	}
	if len(x.Args) == 0 {
		return nil, errors.New("nsinit: exec: no command")
	}
	path := x.Path
	if path == "" {
		for _, kv := range x.Env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				path = v
			}
		}
	}
	r := request{typ: reqExec, cwd: x.Cwd, path: path, argv: x.Args, env: x.Env}
	if x.TTY != nil {
		if x.Stdin != nil || x.Stdout != nil || x.Stderr != nil {
			return nil, errors.New("nsinit: exec: a terminal is the whole stdio: no Stdin, Stdout or Stderr with TTY")
		}
		if p.ttyDenied != "" {
			return nil, fmt.Errorf("nsinit: exec: the profile denies %s, which a terminal needs", p.ttyDenied)
		}
		r.flags |= execTTY
		r.winsize = uint32(x.TTY.Rows) | uint32(x.TTY.Cols)<<16
	}
	var files []*os.File
	for i, f := range []*os.File{x.Stdin, x.Stdout, x.Stderr} {
		if f != nil {
			r.flags |= 1 << i
			files = append(files, f)
		}
	}
	c := &Child{s: s, done: make(chan struct{})}
	rep, err := s.roundTrip(r, &call{reply: make(chan report, 1), child: c}, files)
	if err != nil {
		return nil, fmt.Errorf("nsinit: exec %s: %w", x.Args[0], err)
	}
	if rep.Type != repExecStarted {
		return nil, &ExecError{Step: rep.Step, Errno: unix.Errno(rep.Errno), Msg: rep.Error}
	}
	return c, nil
}

// SignalAll sends sig to every process of a serving sandbox but its
// init; none left to signal is not an error.
func (p *Process) SignalAll(sig syscall.Signal) error {
	if p.serve == nil || !p.serving.Load() {
		return ErrNotServing
	}
	err := p.serve.ack(request{typ: reqSignalAll, sig: int32(sig)})
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// waitServe is Wait for a serving sandbox: the demux owns the socket, and
// the init's end is its wait status.
func (p *Process) waitServe() (Exit, error) {
	<-p.serve.done
	p.wait()
	if p.holders != nil {
		p.holders.Wait()
	}
	p.sock.Close()
	if p.notifier != nil {
		p.notifier.Close()
	}
	if p.status == nil {
		return Exit{}, fmt.Errorf("nsinit: wait: %v", p.err)
	}
	ws := *p.status
	if ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}, nil
	}
	return Exit{Code: ws.ExitStatus()}, nil
}

// request is a request to a serving init before encoding
// (cinit.Request).
type request struct {
	typ, flags uint32
	id, target uint64
	sig        int32
	winsize    uint32
	cwd, path  string
	argv, env  []string
}
