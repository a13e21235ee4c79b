//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// DefaultWaitDelay is how long an exec's result waits, once its process
// has ended, for its output pipes to close: a background child that kept
// them open (`server &`) does not hold the exec's result any longer.
const DefaultWaitDelay = 250 * time.Millisecond

// keptExits is how many ended detached processes a Host keeps for a
// later wait; the oldest are dropped first.
const keptExits = 64

// ErrClosed is the error of every call on a session that has ended.
var ErrClosed = errors.New("session: the session has ended")

// Config is what a session is opened with.
type Config struct {
	// ID names the session (lifecycle.Options.ID); "" is anonymous: no
	// record and no socket.
	ID string
	// StateDir holds the record (lifecycle.Options.StateDir).
	StateDir string
	// Spec is the compiled policy. Its process's Env and Cwd are each
	// exec's defaults; its Args are not run.
	Spec *specs.Spec
	// Listen serves the protocol on the session's socket (needs an ID).
	Listen bool
	// Persistent and IdleTimeout are reported by State; the holder acts
	// on them.
	Persistent  bool
	IdleTimeout time.Duration

	Warn          func(string)
	UsernsBlocker func(error) string
	SeccompCache  seccomp.Compiler
	// Unwatched leaves denials to the filter alone: no listener, no
	// violation events.
	Unwatched bool
}

// Host is a live session: a serving sandbox, the processes started in it
// and, when it listens, the protocol's socket. Its methods may be called
// from any goroutine.
type Host struct {
	cfg    Config
	sb     *lifecycle.Sandbox
	env    []string
	cwd    string
	socket string
	ln     *listener

	mu       sync.Mutex
	nextProc uint64
	procs    map[string]*Proc
	ended    []string // detached processes that ended, oldest first
	subs     map[*subscriber]struct{}
	conns    int
	lastUse  time.Time
	closing  bool
	ending   bool // over has begun: no new subscriber
	failed   bool // it ended without a Close
	// delivering counts the subscribers' goroutines, which over waits
	// for so that the final event reaches them.
	delivering sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
}

// Open creates and starts a session.
func Open(ctx context.Context, cfg Config) (_ *Host, err error) {
	if cfg.Spec == nil || cfg.Spec.Process == nil {
		return nil, errors.New("session: a Spec with a process is needed")
	}
	if cfg.Listen && cfg.ID == "" {
		return nil, errors.New("session: a session that listens needs an ID")
	}
	h := &Host{
		cfg: cfg, env: cfg.Spec.Process.Env, cwd: cfg.Spec.Process.Cwd,
		procs: map[string]*Proc{}, subs: map[*subscriber]struct{}{},
		lastUse: time.Now(), done: make(chan struct{}),
	}
	if h.cwd == "" {
		h.cwd = "/"
	}
	lo := lifecycle.Options{
		ID: cfg.ID, StateDir: cfg.StateDir, Serve: true, Holder: cfg.Persistent,
		Warn: cfg.Warn, UsernsBlocker: cfg.UsernsBlocker, SeccompCache: cfg.SeccompCache,
	}
	if !cfg.Unwatched {
		lo.OnViolation = h.violation
	}
	if cfg.Listen {
		// The socket is bound under a temporary name and takes its own
		// once the ID is this session's (the record is made) and the
		// session runs.
		h.socket, err = SocketPath(cfg.StateDir, cfg.ID)
		if err != nil {
			return nil, err
		}
		lo.Socket = h.socket
		h.ln, err = listen(h, h.socket)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				h.ln.close()
			}
		}()
	}
	sb, err := lifecycle.Create(ctx, cfg.Spec, lo)
	if err != nil {
		return nil, err
	}
	if err := sb.Start(); err != nil {
		_ = sb.Delete()
		return nil, err
	}
	h.sb = sb
	if h.ln != nil {
		if err := h.ln.publish(); err != nil {
			_ = sb.Delete()
			return nil, err
		}
	}
	go func() {
		// Wait reaps the init whatever ends it: a Delete, or its death.
		_, _ = sb.Wait()
		h.over()
	}()
	if h.ln != nil {
		go h.serve()
	}
	return h, nil
}

// ID is the session's name.
func (h *Host) ID() string { return h.cfg.ID }

// Spec is what the session was built from.
func (h *Host) Spec() *specs.Spec { return h.cfg.Spec }

// WorkingDir is the working directory of an exec that names none.
func (h *Host) WorkingDir() string { return h.cwd }

// Socket is the path of the session's socket, "" when it does not listen.
func (h *Host) Socket() string { return h.socket }

// Done is closed once the session has ended.
func (h *Host) Done() <-chan struct{} { return h.done }

// Alive says whether the session still runs.
func (h *Host) Alive() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// Resolve maps a path in the session to the host path that holds it
// (see the package's Resolve).
func (h *Host) Resolve(p string, write bool) (string, error) {
	return Resolve(h.cfg.Spec, h.cwd, p, write)
}

// ExecRequest is one process to run in a session.
type ExecRequest struct {
	// Args is the command, looked up in the exec's PATH; Shell, instead,
	// is a command line for /bin/sh -c. Exactly one is given.
	Args  []string
	Shell string
	// Cwd is the working directory; relative to the session's, "" is it.
	Cwd string
	// Env is KEY=VALUE entries over the session's environment, or the
	// whole environment with ReplaceEnv. Nothing of an earlier exec's
	// environment is ever seen.
	Env        []string
	ReplaceEnv bool
	// Stdin, Stdout and Stderr: an *os.File is given to the process as it
	// is; another Reader or Writer is served through a pipe; nil is
	// /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Timeout kills the exec's process group once it has passed; the
	// result says TimedOut, with code 124.
	Timeout time.Duration
	// MaxOutput caps the bytes passed on per piped stream; the rest is
	// read and dropped, and the result says which stream was cut.
	MaxOutput int64
	// WaitDelay bounds the wait for the pipes after the process ended
	// (0: DefaultWaitDelay; negative: no bound).
	WaitDelay time.Duration
	// Detach keeps the process's end for a later Wait by its ID when the
	// caller does not wait for it (protocol clients that go away).
	Detach bool
	// TTY runs the process on a terminal of the sandbox's own, of this
	// size: Stdin feeds it (its end is sent as ^D), Stdout receives all
	// its output, and neither may be an *os.File; Stderr must be nil.
	TTY *Winsize
}

// argv is the command the request runs.
func (r *ExecRequest) argv() ([]string, error) {
	switch {
	case len(r.Args) > 0 && r.Shell != "":
		return nil, &Error{Kind: KindProtocol, Message: "exec: give args or shell, not both"}
	case r.Shell != "":
		return []string{"/bin/sh", "-c", r.Shell}, nil
	case len(r.Args) == 0 || r.Args[0] == "":
		return nil, &Error{Kind: KindProtocol, Message: "exec: no command"}
	}
	return r.Args, nil
}

// environ is the request's environment over the session's.
func (h *Host) environ(r *ExecRequest) ([]string, error) {
	for _, kv := range r.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
			return nil, &Error{Kind: KindProtocol, Message: fmt.Sprintf("exec: environment entry %q is not KEY=VALUE", kv)}
		}
	}
	if r.ReplaceEnv {
		return r.Env, nil
	}
	if len(r.Env) == 0 {
		return h.env, nil
	}
	env := make([]string, 0, len(h.env)+len(r.Env))
	over := map[string]bool{}
	for _, kv := range r.Env {
		k, _, _ := strings.Cut(kv, "=")
		over[k] = true
	}
	for _, kv := range h.env {
		if k, _, _ := strings.Cut(kv, "="); !over[k] {
			env = append(env, kv)
		}
	}
	return append(env, r.Env...), nil
}

// Proc is a process started in a session.
type Proc struct {
	h      *Host
	id     string
	args   []string
	detach bool
	child  *nsinit.Child
	start  time.Time

	timedOut, aborted atomic.Bool
	cut               [2]atomic.Bool // stdout, stderr truncated
	copies            sync.WaitGroup
	readers           []*os.File
	tty               *os.File // the terminal's master (ExecRequest.TTY)
	stops             []func() bool

	done chan struct{}
	info ExitInfo
}

// ID names the process in its session ("p1", "p2", ...).
func (p *Proc) ID() string { return p.id }

// Pid is the process's pid in the session's PID namespace.
func (p *Proc) Pid() int { return p.child.Pid() }

// Done is closed once the process has ended and its output is passed on.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process and its output and says how it ended.
func (p *Proc) Wait() ExitInfo {
	<-p.done
	return p.info
}

// Signal sends sig to the process, or to its process group, while it has
// not been reaped; afterwards it returns os.ErrProcessDone.
func (p *Proc) Signal(sig syscall.Signal, group bool) error {
	return p.child.Signal(sig, group)
}

// Resize sets the size of the process's terminal (ExecRequest.TTY).
func (p *Proc) Resize(ws Winsize) error {
	if p.tty == nil {
		return &Error{Kind: KindProtocol, Message: "resize: process " + p.id + " has no terminal"}
	}
	rc, err := p.tty.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
	}); err != nil {
		return err
	}
	return ierr
}

// Cancel kills the process's group and marks its end as aborted.
func (p *Proc) Cancel() {
	p.aborted.Store(true)
	_ = p.child.Signal(unix.SIGKILL, true)
}

func (p *Proc) timeout() {
	p.timedOut.Store(true)
	_ = p.child.Signal(unix.SIGKILL, true)
}

// Exec starts a process in the session. It returns once the process
// runs; a command that is not found or not executable runs all the same
// and ends with 127 or 126. Cancelling ctx kills the process's group and
// marks its end as aborted.
func (h *Host) Exec(ctx context.Context, r ExecRequest) (_ *Proc, err error) {
	argv, err := r.argv()
	if err != nil {
		return nil, err
	}
	env, err := h.environ(&r)
	if err != nil {
		return nil, err
	}
	cwd := h.cwd
	if r.Cwd != "" {
		if strings.ContainsRune(r.Cwd, 0) {
			return nil, &Error{Kind: KindProtocol, Message: "exec: cwd holds a NUL byte"}
		}
		cwd = r.Cwd
		if !strings.HasPrefix(cwd, "/") {
			cwd = h.cwd + "/" + cwd
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.closing || !h.Alive() {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	h.nextProc++
	p := &Proc{h: h, id: "p" + strconv.FormatUint(h.nextProc, 10), args: argv, detach: r.Detach, done: make(chan struct{})}
	h.lastUse = time.Now()
	h.mu.Unlock()

	for i, v := range []any{r.Stdin, r.Stdout, r.Stderr} {
		if f, ok := v.(*os.File); ok {
			if err := stdioFD(f); err != nil {
				return nil, &Error{Kind: KindPolicy, Message: "exec: " + [3]string{"stdin", "stdout", "stderr"}[i] + ": " + err.Error()}
			}
		}
	}
	x := nsinit.ExecSpec{Args: argv, Env: env, Cwd: cwd}
	if r.TTY != nil {
		return h.execTTY(ctx, p, r, x)
	}
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			for _, f := range p.readers {
				f.Close()
			}
		}
	}()
	// Stdin.
	switch in := r.Stdin.(type) {
	case nil:
	case *os.File:
		x.Stdin = in
	default:
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("session: exec: %w", err)
		}
		childEnds = append(childEnds, pr)
		x.Stdin = pr
		go func() {
			_, _ = io.Copy(pw, in)
			pw.Close()
		}()
	}
	// Stdout and Stderr; one pipe when they are the same writer.
	outs := [2]io.Writer{r.Stdout, r.Stderr}
	var files [2]*os.File
	for i, w := range outs {
		switch w := w.(type) {
		case nil:
		case *os.File:
			files[i] = w
		default:
			if i == 1 && sameWriter(outs[0], w) {
				files[1] = files[0]
				continue
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				return nil, fmt.Errorf("session: exec: %w", err)
			}
			childEnds = append(childEnds, pw)
			p.readers = append(p.readers, pr)
			files[i] = pw
			p.copies.Add(1)
			go p.copy(pr, w, r.MaxOutput, &p.cut[i])
		}
	}
	x.Stdout, x.Stderr = files[0], files[1]

	p.start = time.Now()
	c, err := h.sb.Exec(x)
	if err != nil {
		return nil, h.execErr(err)
	}
	p.child = c
	h.started(ctx, p, &r)
	return p, nil
}

// execErr turns nsinit's failure to start an exec into the session's:
// any failure once the init is gone is ErrClosed, also while the end is
// still being taken down.
func (h *Host) execErr(err error) error {
	var ee *nsinit.ExecError
	switch {
	case errors.As(err, &ee):
		return &Error{Kind: KindRuntime, Message: ee.Error()}
	case errors.Is(err, nsinit.ErrSessionGone), h.sb.State() == lifecycle.Stopped:
		return ErrClosed
	}
	return err
}

// started arms a running process's timeout and cancellation, registers it
// and waits for its end in the background.
func (h *Host) started(ctx context.Context, p *Proc, r *ExecRequest) {
	if r.Timeout > 0 {
		t := time.AfterFunc(r.Timeout, p.timeout)
		p.stops = append(p.stops, t.Stop)
	}
	if ctx.Done() != nil {
		p.stops = append(p.stops, context.AfterFunc(ctx, p.Cancel))
	}
	h.mu.Lock()
	h.procs[p.id] = p
	h.mu.Unlock()
	delay := r.WaitDelay
	if delay == 0 {
		delay = DefaultWaitDelay
	}
	go p.finish(delay)
}

// execTTY starts a process on a terminal (ExecRequest.TTY).
func (h *Host) execTTY(ctx context.Context, p *Proc, r ExecRequest, x nsinit.ExecSpec) (*Proc, error) {
	_, inFile := r.Stdin.(*os.File)
	_, outFile := r.Stdout.(*os.File)
	switch {
	case inFile || outFile:
		return nil, &Error{Kind: KindProtocol, Message: "exec: a terminal is the whole stdio: no descriptor with it"}
	case r.Stderr != nil:
		return nil, &Error{Kind: KindProtocol, Message: "exec: a terminal has one output stream: no stderr with it"}
	}
	x.TTY = &nsinit.Winsize{Rows: r.TTY.Rows, Cols: r.TTY.Cols}
	p.start = time.Now()
	c, err := h.sb.Exec(x)
	if err != nil {
		return nil, h.execErr(err)
	}
	p.child = c
	m := c.TTY()
	p.tty = m
	p.readers = append(p.readers, m)
	out := r.Stdout
	if out == nil {
		// Read all the same: a terminal nobody reads stalls its writer.
		out = io.Discard
	}
	p.copies.Add(1)
	go p.copy(m, out, r.MaxOutput, &p.cut[0])
	if in := r.Stdin; in != nil {
		go func() {
			if _, err := io.Copy(m, in); err == nil {
				_, _ = m.Write([]byte{4}) // ^D: end of input for the terminal's reader
			}
		}()
	}
	h.started(ctx, p, &r)
	return p, nil
}

// stdioFD refuses a descriptor that would reach past the sandbox as a
// process's stdio: a directory (openat relative to it walks the host's
// tree), an O_PATH descriptor, or a terminal, which a background process
// of the session would keep after the exec (reading the keys typed for
// the caller's shell, or injecting some where TIOCSTI is allowed): a
// terminal goes through pipes or ExecRequest.TTY instead.
func stdioFD(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var st unix.Stat_t
	var flags int
	var serr, ferr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Fstat(int(fd), &st)
		flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0)
	}); err != nil {
		return err
	}
	switch {
	case serr != nil:
		return serr
	case ferr != nil:
		return ferr
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return errors.New("a directory cannot be a process's stdio")
	case flags&unix.O_PATH != 0:
		return errors.New("an O_PATH descriptor cannot be a process's stdio")
	case st.Mode&unix.S_IFMT == unix.S_IFCHR:
		var terr error
		if err := rc.Control(func(fd uintptr) { _, terr = unix.IoctlGetTermios(int(fd), unix.TCGETS) }); err == nil && terr == nil {
			return errors.New("a terminal cannot be passed into a session, where it would outlive the exec: relay it (pipes) or give the exec a terminal of its own (tty)")
		}
	}
	return nil
}

// sameWriter says whether a and b are the same comparable writer.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a != nil && a == b
}

// copy passes a pipe's bytes on to w, up to max when max > 0, and reads
// the rest to the end so that the process never blocks on a full pipe.
// Once finish sets a read deadline (the wait delay has passed), the bytes
// already in the pipe are still passed on, then copy stops: a slow w
// loses nothing that the process wrote, and a background process that
// holds the pipe open holds the copy no longer.
func (p *Proc) copy(r *os.File, w io.Writer, max int64, cut *atomic.Bool) {
	defer p.copies.Done()
	buf := make([]byte, 32*1024)
	var sent int64
	wok := true
	left := -1 // bytes still to read once the delay has passed
	for left != 0 {
		b := buf
		if left > 0 {
			b = buf[:min(left, len(buf))]
		}
		n, err := r.Read(b)
		if n > 0 {
			if left > 0 {
				left -= n
			}
			b := buf[:n]
			if max > 0 && int64(n) > max-sent {
				b = b[:max-sent]
				cut.Store(true)
			}
			if len(b) > 0 && wok {
				if _, werr := w.Write(b); werr != nil {
					wok = false
				}
			}
			sent += int64(len(b))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && left < 0 {
			left = pipeQueued(r)
			if left > 0 && r.SetReadDeadline(time.Time{}) != nil {
				return
			}
			continue
		}
		if err != nil {
			return
		}
	}
}

// pipeQueued is the count of bytes waiting in a pipe (FIONREAD).
func pipeQueued(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		if q, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil {
			n = q
		}
	})
	return n
}

// finish waits for the process, then for its pipes (at most delay), and
// reports its end.
func (p *Proc) finish(delay time.Duration) {
	exit, err := p.child.Exit()
	for _, stop := range p.stops {
		stop()
	}
	copied := make(chan struct{})
	go func() {
		p.copies.Wait()
		close(copied)
	}()
	if delay < 0 {
		<-copied
	} else {
		t := time.NewTimer(delay)
		select {
		case <-copied:
		case <-t.C:
		}
		t.Stop()
	}
	// The deadline ends copies still blocked on a pipe that a background
	// process holds open, once they have passed on what is in it.
	for _, f := range p.readers {
		_ = f.SetReadDeadline(time.Unix(1, 0))
	}
	<-copied
	for _, f := range p.readers {
		f.Close()
	}
	// Only a process that our SIGKILL ended was timed out or aborted: one
	// that ended by itself just before keeps its own status.
	killed := exit.Signal == int(unix.SIGKILL)
	p.info = ExitInfo{
		Code: exit.Code, Signal: exit.Signal,
		Aborted:         killed && p.aborted.Load(),
		StdoutTruncated: p.cut[0].Load(), StderrTruncated: p.cut[1].Load(),
		DurationMS: float64(time.Since(p.start).Microseconds()) / 1000,
	}
	if killed && p.timedOut.Load() && !p.info.Aborted {
		p.info.TimedOut = true
		p.info.Code = 124
	}
	if err != nil {
		// The session ended first: no status to report.
		p.info.Code, p.info.Signal = -1, 0
		p.info.Error = err.Error()
	}
	h := p.h
	h.mu.Lock()
	if p.detach {
		h.ended = append(h.ended, p.id)
		if len(h.ended) > keptExits {
			delete(h.procs, h.ended[0])
			h.ended = h.ended[1:]
		}
	} else {
		delete(h.procs, p.id)
	}
	h.lastUse = time.Now()
	h.mu.Unlock()
	close(p.done)
	info := p.info
	h.publish(Event{Kind: "exit", Proc: p.id, Exit: &info})
}

// proc finds a process by its ID; a detached one that has ended is
// forgotten once taken with forget.
func (h *Host) proc(id string, forget bool) *Proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.procs[id]
	if p != nil && forget {
		select {
		case <-p.done:
			delete(h.procs, id)
			for i, e := range h.ended {
				if e == id {
					h.ended = append(h.ended[:i], h.ended[i+1:]...)
					break
				}
			}
		default:
		}
	}
	return p
}

// SignalAll sends sig to every process of the session.
func (h *Host) SignalAll(sig syscall.Signal) error {
	if err := h.sb.SignalAll(sig); err != nil {
		return h.execErr(err)
	}
	return nil
}

// State describes the session and the processes it knows of.
func (h *Host) State() StateInfo {
	st := StateInfo{
		ID: h.cfg.ID, Status: h.status(), Pid: h.sb.Pid(), Cwd: h.cwd,
		Persistent: h.cfg.Persistent, IdleTimeout: h.cfg.IdleTimeout.Seconds(),
		Limits: h.sb.Limits(), Processes: []ProcInfo{},
	}
	for _, m := range h.cfg.Spec.Mounts {
		if m.Destination == "/workspace" {
			st.Workspace = m.Source
		}
	}
	h.mu.Lock()
	for _, p := range h.procs {
		running := true
		select {
		case <-p.done:
			running = false
		default:
		}
		st.Processes = append(st.Processes, ProcInfo{Proc: p.id, Pid: p.child.Pid(), Args: p.args, Running: running, Detach: p.detach})
	}
	h.mu.Unlock()
	return st
}

// status is "running", "stopped" once the session was closed, or
// "failed" when it ended without a Close (its init died: killed, or the
// out-of-memory killer).
func (h *Host) status() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.Alive():
		return "running"
	case h.failed:
		return "failed"
	}
	return "stopped"
}

// Failed says whether the session ended without a Close.
func (h *Host) Failed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failed
}

// idleSince says since when nothing used the session, or zero while a
// client is connected.
func (h *Host) idleSince() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns > 0 {
		return time.Time{}
	}
	return h.lastUse
}

func (h *Host) touch() {
	h.mu.Lock()
	h.lastUse = time.Now()
	h.mu.Unlock()
}

// Close ends the session: every process in it, its sandbox, record and
// socket. It may be called more than once.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closing = true
		h.mu.Unlock()
		if h.ln != nil {
			h.ln.stopAccepting()
		}
		h.closeErr = h.sb.Delete()
		<-h.done
	})
	return h.closeErr
}

// over runs once the sandbox's init is gone, whatever ended it.
// Subscribers get the final "state" event (up to a second for a slow
// one) before the connections end and Done is closed.
func (h *Host) over() {
	if h.ln != nil {
		h.ln.stopAccepting()
	}
	// The state event is the last any subscriber gets: from here on,
	// publish drops events, and no one subscribes.
	h.mu.Lock()
	h.failed = !h.closing
	status := "stopped"
	if h.failed {
		status = "failed"
	}
	h.ending = true
	for s := range h.subs {
		s.push(Event{Kind: "state", Status: status})
		s.close()
	}
	h.subs = map[*subscriber]struct{}{}
	h.mu.Unlock()
	delivered := make(chan struct{})
	go func() {
		h.delivering.Wait()
		close(delivered)
	}()
	select {
	case <-delivered:
	case <-time.After(time.Second):
	}
	if h.ln != nil {
		h.ln.endConns()
	}
	close(h.done)
}

// violation passes a denied call on to the subscribers.
func (h *Host) violation(e seccomp.Event) {
	h.publish(Event{Kind: "violation", Action: e.Name, Target: e.Detail, Suggestion: e.Suggestion, Count: e.Count})
}

// Violations lists the calls the filter denied so far, once the session
// has ended (lifecycle.Sandbox.Violations).
func (h *Host) Violations() []seccomp.Event { return h.sb.Violations() }

// subscriber is one receiver of events. Events are queued without bound
// on the Host's side of a slow receiver: they are few (one per distinct
// denied call, one per process end).
type subscriber struct {
	mu     sync.Mutex
	queue  []Event
	wake   chan struct{}
	closed bool
}

func (s *subscriber) push(e Event) {
	s.mu.Lock()
	if !s.closed {
		s.queue = append(s.queue, e)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next returns the queued events, or ok=false once closed and drained.
func (s *subscriber) next() (evs []Event, ok bool) {
	for {
		s.mu.Lock()
		evs, s.queue = s.queue, nil
		closed := s.closed
		s.mu.Unlock()
		if len(evs) > 0 {
			return evs, true
		}
		if closed {
			return nil, false
		}
		<-s.wake
	}
}

// Subscribe delivers the session's events to fn, in order, from a
// goroutine of its own, until the returned cancel is called or the session
// ends (after its final "state" event).
func (h *Host) Subscribe(fn func(Event)) (cancel func()) {
	s := h.subscribe()
	if s == nil {
		return func() {}
	}
	go func() {
		defer h.delivering.Done()
		for {
			evs, ok := s.next()
			if !ok {
				return
			}
			for _, e := range evs {
				fn(e)
			}
		}
	}()
	return func() { h.unsubscribe(s) }
}

// subscribe adds a subscriber, counted in delivering; nil once the
// session ends.
func (h *Host) subscribe() *subscriber {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ending {
		return nil
	}
	s := &subscriber{wake: make(chan struct{}, 1)}
	h.subs[s] = struct{}{}
	h.delivering.Add(1)
	return s
}

func (h *Host) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.close()
}

// publish queues e for every subscriber, under the lock that over takes
// too, so that nothing comes after the final state event.
func (h *Host) publish(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ending {
		return
	}
	for s := range h.subs {
		s.push(e)
	}
}
