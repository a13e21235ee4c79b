//go:build linux

package session

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/procid"
	"github.com/agentrun/agentrun/internal/statedir"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
	"golang.org/x/sys/unix"
)

// maxSunPath is the longest socket path the kernel takes (sun_path less
// its terminating NUL).
const maxSunPath = 107

// SocketPath is where the session id's socket lives: a directory beside
// the records (stateDir, "" for the caller's default), named by a hash
// of the id, since an id may be longer than a socket path can be.
func SocketPath(stateDir, id string) (string, error) {
	if err := lifecycle.ValidID(id); err != nil {
		return "", err
	}
	if stateDir == "" {
		stateDir = lifecycle.StateDir(os.Geteuid())
	}
	sum := sha256.Sum256([]byte(id))
	p := filepath.Join(stateDir, "s", hex.EncodeToString(sum[:12])+".sock")
	if len(p) > maxSunPath {
		return "", fmt.Errorf("session: the socket path %s is longer than %d bytes: use a shorter state directory", p, maxSunPath)
	}
	return p, nil
}

// listener is a session's socket: bound under a temporary name until the
// session runs (publish), so that nothing connects to a session being
// built, and removed when it closes.
type listener struct {
	h     *Host
	path  string
	tmp   string
	ln    *net.UnixListener
	pidns string

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
	// published is the socket under its name, once publish gave it one:
	// close removes the name only while it is still that socket (a
	// create refused for an ID in use must not remove the socket of the
	// session that has the ID).
	published os.FileInfo
	// replying counts the delete replies on their way (awaitReplies).
	replying atomic.Int32
}

// listen binds the socket for h at a temporary name beside path; only the
// caller's uid may connect (mode 0600 in a 0700 directory, and each peer's
// credentials are checked).
func listen(h *Host, path string) (*listener, error) {
	dir := filepath.Dir(path)
	if err := statedir.Ensure(dir, os.Geteuid()); err != nil {
		return nil, fmt.Errorf("session: socket directory: %w", err)
	}
	pidns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	self, err := procid.Self()
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	sweepTemps(dir)
	tmp := filepath.Join(dir, fmt.Sprintf(".%d.%d.tmp", self.PID, self.Start))
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("session: socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "session-socket")
	defer f.Close()
	// The mode is set before listen: no one connects before it is 0600.
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: tmp}); err != nil {
		return nil, fmt.Errorf("session: bind %s: %w", tmp, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("session: %w", err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("session: listen: %w", err)
	}
	fl, err := net.FileListener(f)
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("session: %w", err)
	}
	ul := fl.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	return &listener{h: h, path: path, tmp: tmp, ln: ul, pidns: pidns, conns: map[*conn]struct{}{}}, nil
}

// sweepTemps removes the temporary sockets of creators that died before
// their session ran (".PID.START.tmp", named after the creator).
func sweepTemps(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	ns, err := procid.Self()
	if err != nil {
		return
	}
	for _, e := range ents {
		var pid int
		var start uint64
		if n, _ := fmt.Sscanf(e.Name(), ".%d.%d.tmp", &pid, &start); n != 2 || e.Name() != fmt.Sprintf(".%d.%d.tmp", pid, start) {
			continue
		}
		if !(procid.ID{PID: pid, Start: start, PidNS: ns.PidNS}).Alive() {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// publish gives the socket its name; a stale socket of a session of the
// same id that died is replaced.
func (l *listener) publish() error {
	fi, err := os.Lstat(l.tmp)
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if err := os.Rename(l.tmp, l.path); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	l.mu.Lock()
	l.published = fi
	l.mu.Unlock()
	return nil
}

// close stops accepting, removes the socket and ends every connection.
func (l *listener) close() {
	l.stopAccepting()
	l.endConns()
}

// stopAccepting closes the listening socket and removes its name; the
// connections stay, for the session's last events.
func (l *listener) stopAccepting() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	published := l.published
	l.mu.Unlock()
	l.ln.Close()
	os.Remove(l.tmp)
	// The name is removed only while it is still this session's socket.
	if fi, err := os.Lstat(l.path); err == nil && published != nil && os.SameFile(fi, published) {
		os.Remove(l.path)
	}
}

// endConns ends every connection.
func (l *listener) endConns() {
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for c := range conns {
		c.c.Close()
	}
}

// awaitReplies waits, at most max, for the replies to delete requests
// that are on their way: the session ends before its delete reply is
// sent, and the process that held it must not exit in between.
func (l *listener) awaitReplies(max time.Duration) {
	for deadline := time.Now().Add(max); l.replying.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// serve accepts connections until the listener closes.
func (h *Host) serve() {
	l := h.ln
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: wait rather than spin.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err := l.peerOK(c); err != nil {
			slog.Debug("session: connection refused", "err", err)
			c.Close()
			continue
		}
		cn := newConn(h, c)
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.conns[cn] = struct{}{}
		l.mu.Unlock()
		go func() {
			cn.run()
			l.mu.Lock()
			if l.conns != nil {
				delete(l.conns, cn)
			}
			l.mu.Unlock()
		}()
	}
}

// peerOK admits only processes of the session's own uid in the holder's
// PID namespace: a process of any sandbox (whose PID namespace is a child
// of it) is refused even where it runs as the same uid.
func (l *listener) peerOK(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("peer uid %d is not %d", cred.Uid, os.Geteuid())
	}
	if cred.Pid <= 0 {
		return errors.New("peer outside this PID namespace")
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(int(cred.Pid)) + "/ns/pid")
	if err != nil || ns != l.pidns {
		return fmt.Errorf("peer %d is in another PID namespace (%s)", cred.Pid, ns)
	}
	return nil
}

// conn is one client's connection.
type conn struct {
	h *Host
	c *net.UnixConn
	r *bufio.Reader

	wmu sync.Mutex // one message (line and payload) at a time
	w   *bufio.Writer

	mu     sync.Mutex
	fds    []fdBatch        // received and not yet claimed, in order
	mine   []int            // the descriptors of the request being served
	read   int64            // the bytes read from the connection
	tied   map[string]*Proc // ended with the connection
	stdins map[string]*stdinPipe
	events func()
}

func newConn(h *Host, c *net.UnixConn) *conn {
	cn := &conn{h: h, c: c, w: bufio.NewWriterSize(c, 64*1024), tied: map[string]*Proc{}, stdins: map[string]*stdinPipe{}}
	cn.r = bufio.NewReaderSize(fdReader{cn}, 64*1024)
	return cn
}

// fdReader reads the connection, queueing the descriptors that come with
// the bytes.
type fdReader struct{ cn *conn }

func (f fdReader) Read(b []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	n, oobn, flags, _, err := f.cn.c.ReadMsgUnix(b, oob)
	n = max(n, 0) // -1 with some errors
	if flags&unix.MSG_CTRUNC != 0 {
		// The kernel closed descriptors that did not fit: the request
		// they came with cannot be served as sent, so its bytes are
		// dropped with the connection.
		n, err = 0, fmt.Errorf("%w: more than %d descriptors with one message", ErrFraming, maxFDs)
	}
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			f.cn.mu.Lock()
			f.cn.fds = append(f.cn.fds, fdBatch{fds: fds, lo: f.cn.read, hi: f.cn.read + int64(n)})
			f.cn.mu.Unlock()
		}
	}
	f.cn.mu.Lock()
	f.cn.read += int64(n)
	f.cn.mu.Unlock()
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// maxFDs is the most descriptors one message may carry.
const maxFDs = 16

// fdBatch is the descriptors that one read brought, with the bytes of the
// stream that it read.
type fdBatch struct {
	fds    []int
	lo, hi int64
}

// claim gives the request that ends where the reading stands, and took
// size bytes, the descriptors that came with it: a read that returns
// descriptors ends with the message they were sent with, and a client
// sends them with the first bytes of a request's line. The descriptors
// of earlier requests that none took are closed: they never pass to
// another request.
func (cn *conn) claim(size int) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	end := cn.read - int64(cn.r.Buffered())
	start := end - int64(size)
	keep := cn.fds[:0]
	for _, b := range cn.fds {
		switch {
		case b.lo <= start && start < b.hi && b.hi <= end:
			cn.mine = append(cn.mine, b.fds...)
		case b.hi <= end:
			closeFDs(b.fds)
		default:
			keep = append(keep, b)
		}
	}
	cn.fds = keep
}

// release closes the descriptors of the request served that it did not
// take.
func (cn *conn) release() {
	cn.mu.Lock()
	closeFDs(cn.mine)
	cn.mine = nil
	cn.mu.Unlock()
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// takeFD takes the request's next descriptor.
func (cn *conn) takeFD() (*os.File, bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if len(cn.mine) == 0 {
		return nil, false
	}
	fd := cn.mine[0]
	cn.mine = cn.mine[1:]
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "passed"), true
}

// send writes one reply, with its payload when there is one.
func (cn *conn) send(r *Reply, payload []byte) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	cn.w.Write(b)
	cn.w.WriteByte('\n')
	cn.w.Write(payload)
	return cn.w.Flush()
}

func (cn *conn) fail(req uint64, kind, format string, a ...any) {
	_ = cn.send(&Reply{Type: TypeError, Req: req, Kind: kind, Message: fmt.Sprintf(format, a...)}, nil)
}

// failErr replies with err, its kind taken from its type.
func (cn *conn) failErr(req uint64, err error) {
	var se *Error
	var pe *PathError
	kind := KindRuntime
	switch {
	case errors.As(err, &se):
		kind = se.Kind
	case errors.As(err, &pe):
		// The reason alone: the client names the path again.
		cn.fail(req, KindPolicy, "%s", pe.Reason)
		return
	case errors.Is(err, ErrClosed), errors.Is(err, nsinit.ErrSessionGone):
		kind = KindUnavailable
	}
	cn.fail(req, kind, "%s", err.Error())
}

// run serves the connection until the client hangs up or the session
// ends; the execs tied to it are killed then.
func (cn *conn) run() {
	h := cn.h
	h.mu.Lock()
	h.conns++
	h.mu.Unlock()
	defer func() {
		cn.c.Close()
		cn.mu.Lock()
		tied, stdins, events := cn.tied, cn.stdins, cn.events
		cn.tied, cn.stdins = map[string]*Proc{}, map[string]*stdinPipe{}
		fds := cn.mine
		for _, b := range cn.fds {
			fds = append(fds, b.fds...)
		}
		cn.fds, cn.mine = nil, nil
		cn.mu.Unlock()
		for _, p := range tied {
			p.Cancel()
		}
		for _, s := range stdins {
			s.close()
		}
		if events != nil {
			events()
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		h.mu.Lock()
		h.conns--
		h.lastUse = time.Now()
		h.mu.Unlock()
	}()
	if err := cn.send(&Reply{Type: TypeHello, Protocol: Protocol, ID: h.cfg.ID, Pid: h.sb.Pid(),
		Features: []string{"fds", "pipes", "events", "resolve", "tty"}}, nil); err != nil {
		return
	}
	for {
		line, err := readLine(cn.r)
		if err != nil {
			if errors.Is(err, ErrFraming) {
				cn.fail(0, KindProtocol, "%v", err)
			}
			return
		}
		h.touch()
		var req Request
		if err := decodeStrict(line, &req); err != nil {
			// What framing and reply need is read leniently: a payload
			// the line announced is skipped, and the req echoed.
			var peek struct {
				Req uint64 `json:"req"`
				Len int    `json:"len"`
			}
			_ = json.Unmarshal(line, &peek)
			size := len(line) + 1
			if peek.Len != 0 {
				if _, perr := readPayload(cn.r, peek.Len); perr != nil {
					cn.fail(peek.Req, KindProtocol, "malformed request: %v; %v", err, perr)
					return
				}
				size += peek.Len
			}
			cn.claim(size)
			cn.release()
			cn.fail(peek.Req, KindProtocol, "malformed request: %v", err)
			continue
		}
		var payload []byte
		if req.Len != 0 {
			if payload, err = readPayload(cn.r, req.Len); err != nil {
				if errors.Is(err, ErrFraming) {
					cn.fail(req.Req, KindProtocol, "%v", err)
				}
				return
			}
		}
		cn.claim(len(line) + 1 + len(payload))
		ok := cn.handle(&req, payload)
		cn.release()
		if !ok {
			return
		}
	}
}

// handle serves one request; false ends the connection.
func (cn *conn) handle(req *Request, payload []byte) bool {
	h := cn.h
	switch req.Op {
	case OpExec:
		cn.exec(req)
	case OpInput:
		cn.mu.Lock()
		s := cn.stdins[req.Proc]
		cn.mu.Unlock()
		if s == nil {
			cn.fail(req.Req, KindNotFound, "input: no stdin pipe of process %q on this connection", req.Proc)
			return true
		}
		if len(payload) > 0 {
			s.write(payload)
		}
		if req.EOF {
			cn.mu.Lock()
			delete(cn.stdins, req.Proc)
			cn.mu.Unlock()
			s.close()
		}
	case OpSignal, OpCancel:
		p := h.proc(req.Proc, false)
		if p == nil {
			cn.fail(req.Req, KindNotFound, "%s: no process %q", req.Op, req.Proc)
			return true
		}
		if req.Op == OpCancel {
			p.Cancel()
			return cn.send(&Reply{Type: TypeOK, Req: req.Req}, nil) == nil
		}
		sig, err := ParseSignal(req.Signal)
		if err != nil {
			cn.fail(req.Req, KindProtocol, "signal: %v", err)
			return true
		}
		if err := p.Signal(syscall.Signal(sig), req.Group); err != nil {
			if errors.Is(err, os.ErrProcessDone) {
				cn.fail(req.Req, KindNotFound, "signal: process %q has ended", req.Proc)
			} else {
				cn.failErr(req.Req, err)
			}
			return true
		}
		return cn.send(&Reply{Type: TypeOK, Req: req.Req}, nil) == nil
	case OpWait:
		p := h.proc(req.Proc, false)
		if p == nil {
			cn.fail(req.Req, KindNotFound, "wait: no process %q", req.Proc)
			return true
		}
		go func() {
			info := p.Wait()
			h.proc(req.Proc, true)
			_ = cn.send(&Reply{Type: TypeExit, Req: req.Req, Proc: p.id, ExitInfo: &info}, nil)
		}()
	case OpKill:
		sig := int(unix.SIGTERM)
		if req.Signal != "" {
			var err error
			if sig, err = ParseSignal(req.Signal); err != nil {
				cn.fail(req.Req, KindProtocol, "kill: %v", err)
				return true
			}
		}
		if err := h.SignalAll(syscall.Signal(sig)); err != nil {
			cn.failErr(req.Req, err)
			return true
		}
		return cn.send(&Reply{Type: TypeOK, Req: req.Req}, nil) == nil
	case OpState:
		st := h.State()
		return cn.send(&Reply{Type: TypeState, Req: req.Req, State: &st}, nil) == nil
	case OpResolve:
		hp, err := h.Resolve(req.Path, req.Write)
		if err != nil {
			cn.failErr(req.Req, err)
			return true
		}
		return cn.send(&Reply{Type: TypePath, Req: req.Req, HostPath: hp}, nil) == nil
	case OpEvents:
		on := req.On == nil || *req.On
		cn.mu.Lock()
		old := cn.events
		cn.events = nil
		// Events queue from here on but go out after the ok.
		gate := make(chan struct{})
		if on {
			id := req.Req
			cn.events = h.Subscribe(func(e Event) {
				<-gate
				_ = cn.send(&Reply{Type: TypeEvent, Req: id, Event: &e}, nil)
			})
		}
		cn.mu.Unlock()
		if old != nil {
			old()
		}
		err := cn.send(&Reply{Type: TypeOK, Req: req.Req}, nil)
		close(gate)
		return err == nil
	case OpDelete:
		// The reply comes once everything is gone; this connection is
		// left open for it, and ends after it. The holder process waits
		// for it before it exits (awaitReplies).
		if l := h.ln; l != nil {
			l.mu.Lock()
			delete(l.conns, cn)
			l.mu.Unlock()
			l.replying.Add(1)
			defer l.replying.Add(-1)
		}
		err := h.Close()
		if err != nil {
			cn.failErr(req.Req, err)
		} else {
			_ = cn.send(&Reply{Type: TypeOK, Req: req.Req}, nil)
		}
		return false
	case OpResize:
		p := h.proc(req.Proc, false)
		if p == nil {
			cn.fail(req.Req, KindNotFound, "resize: no process %q", req.Proc)
			return true
		}
		select {
		case <-p.Done():
			cn.fail(req.Req, KindNotFound, "resize: process %q has ended", req.Proc)
			return true
		default:
		}
		if err := p.Resize(Winsize{Rows: req.Rows, Cols: req.Cols}); err != nil {
			cn.failErr(req.Req, err)
			return true
		}
		return cn.send(&Reply{Type: TypeOK, Req: req.Req}, nil) == nil
	case OpPing:
		return cn.send(&Reply{Type: TypeOK, Req: req.Req}, nil) == nil
	default:
		cn.fail(req.Req, KindProtocol, "unknown op %q", req.Op)
	}
	return true
}

// exec serves an exec request: started, then data, then exit.
func (cn *conn) exec(req *Request) {
	h := cn.h
	r := ExecRequest{
		Args: req.Args, Shell: req.Shell, Cwd: req.Cwd, Env: req.Env, ReplaceEnv: req.ReplaceEnv,
		Timeout: time.Duration(req.TimeoutMS) * time.Millisecond, MaxOutput: req.MaxOutputBytes, Detach: req.Detach,
		TTY: req.TTY,
	}
	stderrMode := req.Stderr
	if req.TTY != nil && stderrMode == "" {
		// A terminal has one output stream, "stdout".
		stderrMode = StdioNull
	}
	if req.WaitDelayMS != nil {
		r.WaitDelay = time.Duration(*req.WaitDelayMS) * time.Millisecond
		if *req.WaitDelayMS == 0 {
			r.WaitDelay = -1
		}
	}
	var taken []*os.File
	closeTaken := func() {
		for _, f := range taken {
			f.Close()
		}
	}
	// Descriptors are taken in the order of the streams that declare them.
	take := func(name string) (*os.File, error) {
		f, ok := cn.takeFD()
		if !ok {
			return nil, &Error{Kind: KindProtocol, Message: "exec: " + name + " is \"fd\" but no descriptor came with the request"}
		}
		taken = append(taken, f)
		return f, nil
	}
	gate := make(chan struct{})
	var stdin *stdinPipe
	var ttyIn *os.File
	defer func() {
		if ttyIn != nil {
			ttyIn.Close()
		}
	}()
	var err error
	switch req.Stdin {
	case "", StdioNull:
	case StdioFD:
		var f *os.File
		if f, err = take("stdin"); err == nil {
			r.Stdin = f
		}
	case StdioPipe:
		var pr *os.File
		if pr, stdin, err = newStdinPipe(); err == nil {
			r.Stdin = pr
			if req.TTY != nil {
				// Fed to the terminal by the Host, not given to the
				// process: it is read until the process has ended.
				r.Stdin = struct{ io.Reader }{pr}
				ttyIn = pr
			} else {
				taken = append(taken, pr)
			}
		}
	default:
		err = &Error{Kind: KindProtocol, Message: fmt.Sprintf("exec: stdin %q: want null, pipe or fd", req.Stdin)}
	}
	for i, mode := range []string{req.Stdout, stderrMode} {
		if err != nil {
			break
		}
		name := [2]string{"stdout", "stderr"}[i]
		var w io.Writer
		switch mode {
		case "", StdioPipe:
			w = &dataWriter{cn: cn, stream: name, gate: gate}
		case StdioNull:
		case StdioFD:
			var f *os.File
			if f, err = take(name); err == nil {
				w = f
			}
		case StdioStdout:
			if i == 1 {
				w = r.Stdout
				break
			}
			fallthrough
		default:
			err = &Error{Kind: KindProtocol, Message: fmt.Sprintf("exec: %s %q: want null, pipe, fd or (stderr) stdout", name, mode)}
		}
		if i == 0 {
			r.Stdout = w
		} else {
			r.Stderr = w
		}
	}
	if err != nil {
		closeTaken()
		if stdin != nil {
			stdin.close()
		}
		close(gate)
		cn.failErr(req.Req, err)
		return
	}
	p, err := h.Exec(context.Background(), r)
	closeTaken()
	if err != nil {
		if stdin != nil {
			stdin.close()
		}
		close(gate)
		cn.failErr(req.Req, err)
		return
	}
	for _, w := range []io.Writer{r.Stdout, r.Stderr} {
		if d, ok := w.(*dataWriter); ok {
			d.proc = p.id
		}
	}
	if in := ttyIn; in != nil {
		ttyIn = nil
		go func() {
			<-p.Done()
			in.Close()
		}()
	}
	cn.mu.Lock()
	if !req.Detach {
		cn.tied[p.id] = p
	}
	if stdin != nil {
		cn.stdins[p.id] = stdin
	}
	cn.mu.Unlock()
	_ = cn.send(&Reply{Type: TypeStarted, Req: req.Req, Proc: p.id, Pid: p.Pid()}, nil)
	close(gate)
	go func() {
		info := p.Wait()
		cn.mu.Lock()
		delete(cn.tied, p.id)
		s := cn.stdins[p.id]
		delete(cn.stdins, p.id)
		cn.mu.Unlock()
		if s != nil {
			s.close()
		}
		if !req.Detach {
			h.proc(p.id, true)
		}
		_ = cn.send(&Reply{Type: TypeExit, Req: req.Req, Proc: p.id, ExitInfo: &info}, nil)
	}()
}

// dataWriter passes a piped stream on as data messages, after the
// process's started reply.
type dataWriter struct {
	cn     *conn
	stream string
	proc   string
	gate   chan struct{}
}

func (d *dataWriter) Write(b []byte) (int, error) {
	<-d.gate
	for off := 0; off < len(b); off += MaxPayload {
		chunk := b[off:min(len(b), off+MaxPayload)]
		if err := d.cn.send(&Reply{Type: TypeData, Proc: d.proc, Stream: d.stream, Len: len(chunk)}, chunk); err != nil {
			return off, err
		}
	}
	return len(b), nil
}

// stdinPipe feeds a piped stdin from input messages, in order, without
// blocking the connection on a process that does not read.
type stdinPipe struct {
	ch   chan []byte
	done chan struct{}
	once sync.Once
}

// stdinQueue is how many input messages may wait for a process that does
// not read before the connection waits too.
const stdinQueue = 16

func newStdinPipe() (*os.File, *stdinPipe, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	s := &stdinPipe{ch: make(chan []byte, stdinQueue), done: make(chan struct{})}
	go func() {
		defer pw.Close()
		for {
			select {
			case b := <-s.ch:
				if _, err := pw.Write(b); err != nil {
					return
				}
			case <-s.done:
				// What came before the end is still written.
				for {
					select {
					case b := <-s.ch:
						if _, err := pw.Write(b); err != nil {
							return
						}
					default:
						return
					}
				}
			}
		}
	}()
	return pr, s, nil
}

func (s *stdinPipe) write(b []byte) {
	select {
	case s.ch <- b:
	case <-s.done:
	}
}

func (s *stdinPipe) close() { s.once.Do(func() { close(s.done) }) }
