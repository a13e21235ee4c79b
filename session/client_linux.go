//go:build linux

package session

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Client is a connection to a session's socket. Its methods may be called
// from any goroutine; one connection carries any number of execs.
type Client struct {
	c     *net.UnixConn
	r     *bufio.Reader
	hello Reply

	wmu sync.Mutex

	mu         sync.Mutex
	next       uint64
	calls      map[uint64]chan Reply  // one reply each
	execs      map[uint64]*RemoteProc // execs waiting for started
	procs      map[string]*RemoteProc // started and not ended
	events     map[uint64]func(Event)
	err        error
	done       chan struct{}
	closing    bool
	subs       map[int]func(Event) // Subscribe's callbacks
	nextSub    int
	subscribed bool // the connection's events subscription is asked for
	// endStatus is the session's final status ("stopped", "failed"), once
	// a subscription of this connection saw it.
	endStatus string
}

// EndStatus is the status of the session's final "state" event, "" until
// a subscription of this connection has seen it.
func (c *Client) EndStatus() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endStatus
}

// Dial connects to the session socket at path and reads its hello.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("session: connect: %w", err)
	}
	c := &Client{
		c: nc.(*net.UnixConn), calls: map[uint64]chan Reply{}, execs: map[uint64]*RemoteProc{},
		procs: map[string]*RemoteProc{}, events: map[uint64]func(Event){}, subs: map[int]func(Event){}, done: make(chan struct{}),
	}
	c.r = bufio.NewReaderSize(c.c, 64*1024)
	if dl, ok := ctx.Deadline(); ok {
		_ = c.c.SetReadDeadline(dl)
	}
	line, err := readLine(c.r)
	_ = c.c.SetReadDeadline(time.Time{})
	if err != nil {
		c.c.Close()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("session: %s closed the connection (not the caller's session, or ending)", path)
		}
		return nil, fmt.Errorf("session: hello: %w", err)
	}
	if err := json.Unmarshal(line, &c.hello); err != nil || c.hello.Type != TypeHello {
		c.c.Close()
		return nil, fmt.Errorf("session: %s did not greet as a session", path)
	}
	if c.hello.Protocol != Protocol {
		c.c.Close()
		return nil, fmt.Errorf("session: protocol %d, want %d", c.hello.Protocol, Protocol)
	}
	go c.demux()
	return c, nil
}

// ID is the session's name, from its hello.
func (c *Client) ID() string { return c.hello.ID }

// Done is closed once the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close ends the connection; execs tied to it are killed by the server.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	return c.c.Close()
}

// send writes a request line, its payload and descriptors.
func (c *Client) send(r *Request, payload []byte, fds []int) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(fds) > 0 {
		// The descriptors go with the line's first bytes.
		n, _, err := c.c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
		if err != nil {
			return c.connErr(err)
		}
		b = b[n:]
	}
	if len(b) > 0 {
		if _, err := c.c.Write(b); err != nil {
			return c.connErr(err)
		}
	}
	if len(payload) > 0 {
		if _, err := c.c.Write(payload); err != nil {
			return c.connErr(err)
		}
	}
	return nil
}

func (c *Client) connErr(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return fmt.Errorf("%w: %v", ErrClosed, err)
}

// call sends r and waits for its one reply.
func (c *Client) call(ctx context.Context, r *Request) (Reply, error) {
	return c.callWith(ctx, r, nil)
}

// callWith is call that also routes the events of r's id to fn.
func (c *Client) callWith(ctx context.Context, r *Request, fn func(Event)) (Reply, error) {
	ch := make(chan Reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return Reply{}, err
	}
	c.next++
	r.Req = c.next
	c.calls[r.Req] = ch
	if fn != nil {
		c.events[r.Req] = fn
	}
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.calls, r.Req)
		delete(c.events, r.Req)
		c.mu.Unlock()
	}
	if err := c.send(r, nil, nil); err != nil {
		forget()
		return Reply{}, err
	}
	select {
	case rep, ok := <-ch:
		if !ok {
			return Reply{}, c.connErr(io.EOF)
		}
		if rep.Type == TypeError {
			forget()
			return rep, &Error{Kind: rep.Kind, Message: rep.Message}
		}
		return rep, nil
	case <-ctx.Done():
		forget()
		return Reply{}, ctx.Err()
	}
}

// demux reads every message and routes it.
func (c *Client) demux() {
	var err error
	defer func() {
		c.mu.Lock()
		if c.closing || err == nil {
			err = io.EOF
		}
		c.err = fmt.Errorf("%w: %v", ErrClosed, err)
		calls, execs, procs := c.calls, c.execs, c.procs
		c.calls, c.execs, c.procs = map[uint64]chan Reply{}, map[uint64]*RemoteProc{}, map[string]*RemoteProc{}
		c.mu.Unlock()
		for _, ch := range calls {
			close(ch)
		}
		for _, p := range execs {
			p.startErr(c.err)
		}
		for _, p := range procs {
			p.end(ExitInfo{Code: -1, Error: c.err.Error()})
		}
		close(c.done)
	}()
	for {
		var line []byte
		line, err = readLine(c.r)
		if err != nil {
			return
		}
		var rep Reply
		if err = json.Unmarshal(line, &rep); err != nil {
			return
		}
		var payload []byte
		if rep.Len > 0 {
			if payload, err = readPayload(c.r, rep.Len); err != nil {
				return
			}
		}
		c.route(&rep, payload)
	}
}

func (c *Client) route(rep *Reply, payload []byte) {
	c.mu.Lock()
	switch rep.Type {
	case TypeData:
		p := c.procs[rep.Proc]
		c.mu.Unlock()
		if p != nil {
			p.data(rep.Stream, payload)
		}
		return
	case TypeStarted:
		p := c.execs[rep.Req]
		delete(c.execs, rep.Req)
		if p != nil {
			c.procs[rep.Proc] = p
		}
		c.mu.Unlock()
		if p != nil {
			p.started(rep.Proc, rep.Pid)
		}
		return
	case TypeExit:
		p := c.procs[rep.Proc]
		if p != nil && p.req == rep.Req {
			delete(c.procs, rep.Proc)
			c.mu.Unlock()
			info := ExitInfo{}
			if rep.ExitInfo != nil {
				info = *rep.ExitInfo
			}
			p.end(info)
			return
		}
	case TypeEvent:
		fn := c.events[rep.Req]
		if e := rep.Event; e != nil && e.Kind == "state" {
			c.endStatus = e.Status
		}
		c.mu.Unlock()
		if fn != nil && rep.Event != nil {
			fn(*rep.Event)
		}
		return
	case TypeError:
		if p := c.execs[rep.Req]; p != nil {
			delete(c.execs, rep.Req)
			c.mu.Unlock()
			p.startErr(&Error{Kind: rep.Kind, Message: rep.Message})
			return
		}
	}
	switch rep.Type {
	case TypeOK, TypeError, TypeState, TypePath, TypeExit:
	default:
		// A reply type of a later protocol version: not this call's.
		c.mu.Unlock()
		return
	}
	ch := c.calls[rep.Req]
	delete(c.calls, rep.Req)
	c.mu.Unlock()
	if ch != nil {
		ch <- *rep
	}
}

// RemoteProc is a process started through a Client.
type RemoteProc struct {
	c      *Client
	req    uint64
	out    [2]io.Writer
	stdin  io.Reader
	start  chan struct{}
	id     string
	pid    int
	err    error
	done   chan struct{}
	info   ExitInfo
	closed sync.Once
}

func (p *RemoteProc) started(id string, pid int) {
	p.id, p.pid = id, pid
	close(p.start)
}

func (p *RemoteProc) startErr(err error) {
	p.err = err
	close(p.start)
}

func (p *RemoteProc) data(stream string, b []byte) {
	i := 0
	if stream == "stderr" {
		i = 1
	}
	if w := p.out[i]; w != nil {
		_, _ = w.Write(b)
	}
}

func (p *RemoteProc) end(info ExitInfo) {
	p.closed.Do(func() {
		p.info = info
		close(p.done)
	})
}

// ID names the process in its session.
func (p *RemoteProc) ID() string { return p.id }

// Pid is its pid in the session's PID namespace.
func (p *RemoteProc) Pid() int { return p.pid }

// Done is closed once it has ended and its output has come.
func (p *RemoteProc) Done() <-chan struct{} { return p.done }

// Wait waits for the process and says how it ended.
func (p *RemoteProc) Wait() ExitInfo {
	<-p.done
	return p.info
}

// Signal sends sig to the process or its group.
func (p *RemoteProc) Signal(sig syscall.Signal, group bool) error {
	_, err := p.c.call(context.Background(), &Request{Op: OpSignal, Proc: p.id, Signal: strconv.Itoa(int(sig)), Group: group})
	var se *Error
	if errors.As(err, &se) && se.Kind == KindNotFound {
		return os.ErrProcessDone
	}
	return err
}

// Resize sets the size of the process's terminal.
func (p *RemoteProc) Resize(ws Winsize) error {
	_, err := p.c.call(context.Background(), &Request{Op: OpResize, Proc: p.id, Rows: ws.Rows, Cols: ws.Cols})
	return err
}

// Cancel kills the process's group; its end says aborted.
func (p *RemoteProc) Cancel() {
	_, _ = p.c.call(context.Background(), &Request{Op: OpCancel, Proc: p.id})
}

// Exec starts a process in the session. An *os.File among the stdio is
// passed to it as it is; other readers and writers are served through the
// connection. Cancelling ctx cancels the process.
func (c *Client) Exec(ctx context.Context, r ExecRequest) (*RemoteProc, error) {
	req := &Request{
		Op: OpExec, Args: r.Args, Shell: r.Shell, Cwd: r.Cwd, Env: r.Env, ReplaceEnv: r.ReplaceEnv,
		TimeoutMS: r.Timeout.Milliseconds(), MaxOutputBytes: r.MaxOutput, Detach: r.Detach, TTY: r.TTY,
	}
	if r.TTY != nil {
		// A terminal's stdio goes through the connection: the server
		// feeds the terminal, never a descriptor.
		if f, ok := r.Stdin.(*os.File); ok {
			r.Stdin = struct{ io.Reader }{f}
		}
		if f, ok := r.Stdout.(*os.File); ok {
			r.Stdout = struct{ io.Writer }{f}
		}
	}
	if r.Timeout > 0 && req.TimeoutMS == 0 {
		req.TimeoutMS = 1
	}
	if r.WaitDelay != 0 {
		ms := r.WaitDelay.Milliseconds()
		if r.WaitDelay < 0 {
			ms = 0
		} else if ms == 0 {
			ms = 1
		}
		req.WaitDelayMS = &ms
	}
	p := &RemoteProc{c: c, start: make(chan struct{}), done: make(chan struct{})}
	var fds []int
	var files []*os.File
	switch in := r.Stdin.(type) {
	case nil:
		req.Stdin = StdioNull
	case *os.File:
		req.Stdin = StdioFD
		files = append(files, in)
	default:
		req.Stdin = StdioPipe
		p.stdin = in
	}
	modes := [2]*string{&req.Stdout, &req.Stderr}
	for i, w := range [2]io.Writer{r.Stdout, r.Stderr} {
		switch w := w.(type) {
		case nil:
			*modes[i] = StdioNull
		case *os.File:
			*modes[i] = StdioFD
			files = append(files, w)
		default:
			if i == 1 && sameWriter(r.Stdout, w) {
				*modes[i] = StdioStdout
				continue
			}
			*modes[i] = StdioPipe
			p.out[i] = w
		}
	}
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	req.Req = c.next
	p.req = req.Req
	c.execs[req.Req] = p
	c.mu.Unlock()
	err := c.send(req, nil, fds)
	runtime.KeepAlive(files)
	if err != nil {
		c.mu.Lock()
		delete(c.execs, req.Req)
		c.mu.Unlock()
		return nil, err
	}
	<-p.start
	if p.err != nil {
		return nil, p.err
	}
	if p.stdin != nil {
		go p.feed()
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, p.Cancel)
		go func() {
			<-p.done
			stop()
		}()
	}
	return p, nil
}

// feed sends the stdin reader's bytes as input messages, then its end.
func (p *RemoteProc) feed() {
	buf := make([]byte, 64*1024)
	for {
		n, err := p.stdin.Read(buf)
		if n > 0 {
			if p.c.send(&Request{Op: OpInput, Proc: p.id, Len: n}, buf[:n], nil) != nil {
				return
			}
		}
		if err != nil {
			_ = p.c.send(&Request{Op: OpInput, Proc: p.id, EOF: true}, nil, nil)
			return
		}
		select {
		case <-p.done:
			return
		default:
		}
	}
}

// State asks the session for its state.
func (c *Client) State(ctx context.Context) (StateInfo, error) {
	rep, err := c.call(ctx, &Request{Op: OpState})
	if err != nil {
		return StateInfo{}, err
	}
	if rep.State == nil {
		return StateInfo{}, errors.New("session: a state reply without a state")
	}
	return *rep.State, nil
}

// Resolve asks the session for the host path of p (Host.Resolve).
func (c *Client) Resolve(ctx context.Context, p string, write bool) (string, error) {
	rep, err := c.call(ctx, &Request{Op: OpResolve, Path: p, Write: write})
	if err != nil {
		var se *Error
		if errors.As(err, &se) && se.Kind == KindPolicy {
			return "", &PathError{Path: p, Reason: se.Message}
		}
		return "", err
	}
	return rep.HostPath, nil
}

// Kill sends sig to every process of the session.
func (c *Client) Kill(ctx context.Context, sig syscall.Signal) error {
	_, err := c.call(ctx, &Request{Op: OpKill, Signal: strconv.Itoa(int(sig))})
	return err
}

// Delete ends the session and returns once it is gone.
func (c *Client) Delete(ctx context.Context) error {
	_, err := c.call(ctx, &Request{Op: OpDelete})
	return err
}

// Ping checks that the session answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.call(ctx, &Request{Op: OpPing})
	return err
}

// Subscribe delivers the session's events to fn, from the connection's
// reading goroutine (fn must not block), until cancel is called or the
// connection ends. Any number may subscribe; the connection holds one
// subscription on the server for them all.
func (c *Client) Subscribe(ctx context.Context, fn func(Event)) (cancel func(), err error) {
	c.mu.Lock()
	c.nextSub++
	id := c.nextSub
	c.subs[id] = fn
	need := !c.subscribed
	c.subscribed = true
	c.mu.Unlock()
	cancel = func() {
		c.mu.Lock()
		delete(c.subs, id)
		c.mu.Unlock()
	}
	if need {
		on := true
		if _, err := c.callWith(ctx, &Request{Op: OpEvents, On: &on}, c.dispatch); err != nil {
			cancel()
			c.mu.Lock()
			c.subscribed = false
			c.mu.Unlock()
			return nil, err
		}
	}
	return cancel, nil
}

// dispatch passes an event to every subscriber.
func (c *Client) dispatch(e Event) {
	c.mu.Lock()
	fns := make([]func(Event), 0, len(c.subs))
	for _, fn := range c.subs {
		fns = append(fns, fn)
	}
	c.mu.Unlock()
	for _, fn := range fns {
		fn(e)
	}
}
