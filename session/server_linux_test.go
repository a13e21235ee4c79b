//go:build linux

package session_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/session"
	"golang.org/x/sys/unix"
)

// rawConn is a connection to a session socket spoken by hand.
type rawConn struct {
	t testing.TB
	c *net.UnixConn
	r *bufio.Reader
}

// dialRaw connects and reads the hello.
func dialRaw(t testing.TB, path string) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawConn{t: t, c: nc.(*net.UnixConn), r: bufio.NewReaderSize(nc, 1<<16)}
	t.Cleanup(func() { c.c.Close() })
	if h, _ := c.next(); h.Type != session.TypeHello || h.Protocol != session.Protocol {
		t.Fatalf("hello: %+v", h)
	}
	return c
}

// send writes one line, and descriptors with it.
func (c *rawConn) send(line string, fds ...int) {
	c.t.Helper()
	b := []byte(line + "\n")
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.c.WriteMsgUnix(b, oob, nil)
	if err == nil && n < len(b) {
		// A stream socket may take part of it.
		_, err = c.c.Write(b[n:])
	}
	if err != nil {
		c.t.Fatalf("send %.100s: %v", line, err)
	}
}

// next reads one reply and its payload (5 s at most).
func (c *rawConn) next() (session.Reply, []byte) {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("reading a reply: %v (got %q)", err, line)
	}
	var rep session.Reply
	if err := json.Unmarshal(line, &rep); err != nil {
		c.t.Fatalf("reply %q: %v", line, err)
	}
	var payload []byte
	if rep.Type == session.TypeData && rep.Len > 0 {
		payload = make([]byte, rep.Len)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			c.t.Fatalf("payload: %v", err)
		}
	}
	return rep, payload
}

// want reads the next reply and checks its type, request and kind.
func (c *rawConn) want(typ string, req uint64, kind string) session.Reply {
	c.t.Helper()
	rep, _ := c.next()
	if rep.Type != typ || rep.Req != req || rep.Kind != kind {
		c.t.Fatalf("reply %+v, want type %q req %d kind %q", rep, typ, req, kind)
	}
	return rep
}

// ended says whether the server closed the connection (after what it
// had sent was read).
func (c *rawConn) ended() bool {
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := c.r.ReadByte()
	if err == nil {
		c.t.Errorf("more after the end: %q", b)
		return false
	}
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// execRaw collects an exec's replies: started, data, exit.
type execRaw struct {
	proc        string
	out, errOut bytes.Buffer
	exit        *session.ExitInfo
}

// runExec reads the replies of exec req up to its exit.
func (c *rawConn) runExec(req uint64) *execRaw {
	c.t.Helper()
	x := &execRaw{}
	for x.exit == nil {
		rep, payload := c.next()
		switch {
		case rep.Type == session.TypeStarted && rep.Req == req:
			x.proc = rep.Proc
		case rep.Type == session.TypeData && rep.Proc == x.proc && x.proc != "":
			if rep.Stream == "stderr" {
				x.errOut.Write(payload)
			} else {
				x.out.Write(payload)
			}
		case rep.Type == session.TypeExit && rep.Req == req:
			x.exit = rep.ExitInfo
		case rep.Type == session.TypeError && rep.Req == req:
			c.t.Fatalf("exec %d: %+v", req, rep)
		default:
			c.t.Fatalf("exec %d: unexpected %+v", req, rep)
		}
	}
	return x
}

func listening(t testing.TB, id string) *tsess {
	return open(t, opts{id: id, listen: true})
}

func dial(t testing.TB, s *tsess) *session.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := session.Dial(ctx, s.Socket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClient drives a session through its socket with a Client: stdio
// as data messages and as passed descriptors, a stdin that takes many
// input messages, signals and cancellation, Resolve, State, Kill and
// events.
func TestClient(t *testing.T) {
	s := listening(t, "client")
	if fi, err := os.Stat(s.Socket()); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v %v", fi, err)
	}
	c := dial(t, s)
	ctx := context.Background()
	if c.ID() != "client" {
		t.Errorf("hello id %q", c.ID())
	}

	// Pipes: data messages per stream, and one stream for one writer.
	var o, e bytes.Buffer
	p, err := c.Exec(ctx, session.ExecRequest{Shell: "echo out; echo err >&2; exit 4", Stdout: &o, Stderr: &e})
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Wait(); info.Code != 4 || o.String() != "out\n" || e.String() != "err\n" || p.ID() == "" || p.Pid() <= 1 {
		t.Errorf("exec with pipes: %+v %q %q (%s pid %d)", info, o.String(), e.String(), p.ID(), p.Pid())
	}
	var m bytes.Buffer
	p, err = c.Exec(ctx, session.ExecRequest{Shell: `echo a; echo b >&2; [ "$(readlink /proc/$$/fd/1)" = "$(readlink /proc/$$/fd/2)" ] && echo one-pipe`, Stdout: &m, Stderr: &m})
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Wait(); info.Code != 0 || m.String() != "a\nb\none-pipe\n" {
		t.Errorf("exec with one writer for both: %+v %q", info, m.String())
	}

	// Descriptors: a pipe for stdout, a file for stderr, a file for stdin.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ef, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	inPath := filepath.Join(t.TempDir(), "stdin")
	if err := os.WriteFile(inPath, []byte("from a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inf, err := os.Open(inPath)
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	p, err = c.Exec(ctx, session.ExecRequest{Shell: "cat; echo to-stderr >&2", Stdin: inf, Stdout: pw, Stderr: ef})
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(pr)
	info := p.Wait()
	eb, _ := os.ReadFile(ef.Name())
	if info.Code != 0 || string(got) != "from a file\n" || string(eb) != "to-stderr\n" {
		t.Errorf("exec with descriptors: %+v stdout %q stderr %q", info, got, eb)
	}

	// Stdin through input messages: 3 MB, byte-exact.
	in := make([]byte, 3<<20)
	if _, err := rand.Read(in); err != nil {
		t.Fatal(err)
	}
	var echoed bytes.Buffer
	p, err = c.Exec(ctx, session.ExecRequest{Args: []string{"cat"}, Stdin: bytes.NewReader(in), Stdout: &echoed})
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Wait(); info.Code != 0 || !bytes.Equal(echoed.Bytes(), in) {
		t.Errorf("3 MB through cat: %+v, %d bytes back, equal %v", info, echoed.Len(), bytes.Equal(echoed.Bytes(), in))
	}

	// Signal, Cancel and a cancelled context.
	p, err = c.Exec(ctx, session.ExecRequest{Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM, false); err != nil {
		t.Fatal(err)
	}
	if info := p.Wait(); info.Code != 128+15 || info.Signal != 15 || info.Aborted {
		t.Errorf("SIGTERM: %+v", info)
	}
	if err := p.Signal(syscall.SIGTERM, false); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("a signal to an ended process: %v", err)
	}
	p, err = c.Exec(ctx, session.ExecRequest{Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Cancel()
	if info := p.Wait(); !info.Aborted || info.Code != 128+9 {
		t.Errorf("Cancel: %+v", info)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	p, err = c.Exec(cctx, session.ExecRequest{Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Wait(); !info.Aborted || info.TimedOut {
		t.Errorf("a cancelled context: %+v", info)
	}
	cancel()
	p, err = c.Exec(ctx, session.ExecRequest{Args: []string{"sleep", "100"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Wait(); !info.TimedOut || info.Code != 124 || info.Aborted {
		t.Errorf("a timeout: %+v", info)
	}
	// Errors of the session come back as *session.Error.
	if _, err := c.Exec(ctx, session.ExecRequest{Args: []string{"true"}, Cwd: "/no/such/dir"}); errKind(err) != session.KindRuntime {
		t.Errorf("exec in a missing cwd: %v", err)
	}
	if _, err := c.Exec(ctx, session.ExecRequest{Args: []string{"true"}, Env: []string{"NOEQUALS"}}); errKind(err) != session.KindProtocol {
		t.Errorf("exec with a malformed env entry: %v", err)
	}

	// Resolve.
	if err := os.WriteFile(filepath.Join(s.ws, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"/workspace/f", "f"} {
		if hp, err := c.Resolve(ctx, q, true); err != nil || hp != filepath.Join(s.ws, "f") {
			t.Errorf("Resolve %s: %q %v", q, hp, err)
		}
	}
	var pe *session.PathError
	if hp, err := c.Resolve(ctx, "/etc/passwd", false); !errors.As(err, &pe) || pe.Path != "/etc/passwd" {
		t.Errorf("Resolve /etc/passwd: %q %v, want a *PathError", hp, err)
	}

	// State lists a detached process; Kill signals every process.
	evs := make(chan session.Event, 16)
	if _, err := c.Subscribe(ctx, func(e session.Event) { evs <- e }); err != nil {
		t.Fatal(err)
	}
	dm := marker(100)
	d, err := c.Exec(ctx, session.ExecRequest{Args: []string{"sleep", dm}, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != "client" || st.Status != "running" || st.Pid != s.State().Pid || st.Workspace != s.ws || st.Cwd != "/workspace" ||
		!slices.ContainsFunc(st.Processes, func(pi session.ProcInfo) bool {
			return pi.Proc == d.ID() && pi.Pid == d.Pid() && pi.Running && pi.Detach && slices.Equal(pi.Args, []string{"sleep", dm})
		}) {
		t.Errorf("state: %+v", st)
	}
	if err := c.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if info := d.Wait(); info.Signal != 9 || info.Code != 137 {
		t.Errorf("a detached process after Kill: %+v", info)
	}
	timeout := time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case e := <-evs:
			done = e.Kind == "exit" && e.Proc == d.ID() && e.Exit != nil && e.Exit.Signal == 9
		case <-timeout:
			t.Fatal("no exit event for the killed process")
		}
	}
	if err := c.Ping(ctx); err != nil {
		t.Errorf("ping after Kill: %v", err)
	}
	var after bytes.Buffer
	if p, err := c.Exec(ctx, session.ExecRequest{Args: []string{"echo", "alive"}, Stdout: &after}); err != nil || p.Wait().Code != 0 || after.String() != "alive\n" {
		t.Errorf("an exec after Kill: %v %q", err, after.String())
	}
	if len(procsWith(dm)) != 0 {
		t.Errorf("the detached sleep outlived Kill")
	}
}

// TestProtocolErrors: a malformed or refused request gets an error reply
// and the connection goes on; one that loses the framing gets an error
// reply and the connection ends, but not the session.
func TestProtocolErrors(t *testing.T) {
	s := listening(t, "errors")
	c := dialRaw(t, s.Socket())
	for i, tc := range []struct {
		line string
		req  uint64
		kind string
	}{
		{`{not json`, 0, session.KindProtocol},
		{``, 0, session.KindProtocol},
		{`[1,2]`, 0, session.KindProtocol},
		{`{"op":"ping","req":3} {"op":"ping"}`, 0, session.KindProtocol},
		{`{"op":"frobnicate","req":4}`, 4, session.KindProtocol},
		{`{"op":"ping","req":5,"bogus":1}`, 5, session.KindProtocol},
		{`{"op":"exec","req":6}`, 6, session.KindProtocol},
		{`{"op":"exec","req":7,"args":["true"],"shell":"true"}`, 7, session.KindProtocol},
		{`{"op":"exec","req":8,"args":["true"],"stdout":"fd"}`, 8, session.KindProtocol},
		{`{"op":"exec","req":9,"args":["true"],"stdin":"fd"}`, 9, session.KindProtocol},
		{`{"op":"exec","req":10,"args":["true"],"stderr":"tty"}`, 10, session.KindProtocol},
		{`{"op":"exec","req":11,"args":["true"],"stdout":"stdout"}`, 11, session.KindProtocol},
		{`{"op":"exec","req":12,"args":["true"],"env":["NOEQUALS"]}`, 12, session.KindProtocol},
		{`{"op":"exec","req":13,"args":["true"],"cwd":"/no/such/dir"}`, 13, session.KindRuntime},
		{`{"op":"signal","req":14,"proc":"p999","signal":"TERM"}`, 14, session.KindNotFound},
		{`{"op":"wait","req":15,"proc":"p999"}`, 15, session.KindNotFound},
		{`{"op":"cancel","req":16,"proc":"p999"}`, 16, session.KindNotFound},
		{`{"op":"kill","req":17,"signal":"NOSUCH"}`, 17, session.KindProtocol},
		{`{"op":"resolve","req":18,"path":"/etc/shadow"}`, 18, session.KindPolicy},
		{`{"op":"exec","req":19,"args":"true"}`, 19, session.KindProtocol},
	} {
		c.send(tc.line)
		if rep := c.want(session.TypeError, tc.req, tc.kind); rep.Message == "" {
			t.Errorf("%s: an error without a message", tc.line)
		}
		c.send(fmt.Sprintf(`{"op":"ping","req":%d}`, 100+i))
		c.want(session.TypeOK, uint64(100+i), "")
	}
	// An input to no process still reads its payload: the framing holds.
	if _, err := c.c.Write([]byte(`{"op":"input","req":20,"proc":"p999","len":6}` + "\n{\"op\"\n")); err != nil {
		t.Fatal(err)
	}
	c.want(session.TypeError, 20, session.KindNotFound)
	c.send(`{"op":"ping","req":21}`)
	c.want(session.TypeOK, 21, "")
	// So does a malformed request that announces one.
	if _, err := c.c.Write([]byte(`{"op":"input","req":22,"proc":"p999","len":6,"bogus":1}` + "\n{\"op\"\n")); err != nil {
		t.Fatal(err)
	}
	c.want(session.TypeError, 22, session.KindProtocol)
	c.send(`{"op":"ping","req":23}`)
	c.want(session.TypeOK, 23, "")

	// The connection still runs execs, and a descriptor still goes to
	// the exec that declares it after one that declared one in vain.
	c.send(`{"op":"exec","req":30,"args":["sh","-c","echo hi; echo err >&2"]}`)
	if x := c.runExec(30); x.exit.Code != 0 || x.out.String() != "hi\n" || x.errOut.String() != "err\n" {
		t.Errorf("exec after errors: %+v %q %q", x.exit, x.out.String(), x.errOut.String())
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.send(`{"op":"exec","req":31,"args":["echo","via-fd"],"stdout":"fd","stderr":"null"}`, int(pw.Fd()))
	pw.Close()
	if x := c.runExec(31); x.exit.Code != 0 || x.out.Len() != 0 {
		t.Errorf("exec with a passed stdout: %+v %q", x.exit, x.out.String())
	}
	_ = pr.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(pr); string(b) != "via-fd\n" {
		t.Errorf("the passed stdout got %q", b)
	}
	pr.Close()

	// Descriptors that came with a request that took none are closed,
	// and never go to a later request.
	var stale []*os.File
	for i, line := range []string{
		`{"op":"exec","req":32,"args":["echo","refused"],"stdin":"bogus","stdout":"fd"}`,
		`{"op":"ping","req":33}`,
		`{"op":"exec","req":34,"args":["echo","refused"],"stdout":"fd","bogus":1}`,
		`{"op":"exec","req":35,"args":["echo","no-fd"],"stdout":"null"}`,
	} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer pr.Close()
		c.send(line, int(pw.Fd()))
		pw.Close()
		switch i {
		case 1:
			c.want(session.TypeOK, 33, "")
		case 3:
			if x := c.runExec(35); x.exit.Code != 0 {
				t.Errorf("exec 35: %+v", x.exit)
			}
		default:
			c.next()
		}
		stale = append(stale, pr)
	}
	pr, pw, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.send(`{"op":"exec","req":36,"args":["echo","mine"],"stdout":"fd","stderr":"null"}`, int(pw.Fd()))
	pw.Close()
	if x := c.runExec(36); x.exit.Code != 0 {
		t.Errorf("exec 36: %+v", x.exit)
	}
	_ = pr.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(pr); string(b) != "mine\n" {
		t.Errorf("the descriptor of exec 36 got %q", b)
	}
	pr.Close()
	for i, f := range stale {
		// EOF: the server holds the write end no longer.
		_ = f.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(f); err != nil || len(b) != 0 {
			t.Errorf("the descriptor sent with request %d: %q %v", 32+i, b, err)
		}
	}

	// Framing lost: an error reply, then the end of the connection; a new
	// one is served.
	for _, tc := range []struct {
		name string
		send func(c *rawConn)
	}{
		{"a line over MaxLine", func(c *rawConn) {
			go func() {
				// The server stops reading: this write may fail.
				_, _ = c.c.Write(bytes.Repeat([]byte("a"), session.MaxLine+200_000))
			}()
		}},
		{"a line of MaxLine+1 bytes", func(c *rawConn) {
			go func() { _, _ = c.c.Write(append(bytes.Repeat([]byte(" "), session.MaxLine+1), '\n')) }()
		}},
		{"a payload over MaxPayload", func(c *rawConn) {
			c.send(fmt.Sprintf(`{"op":"input","req":1,"proc":"p1","len":%d}`, session.MaxPayload+1))
		}},
		{"a negative payload", func(c *rawConn) { c.send(`{"op":"input","req":1,"proc":"p1","len":-1}`) }},
	} {
		c := dialRaw(t, s.Socket())
		tc.send(c)
		if rep, _ := c.next(); rep.Type != session.TypeError || rep.Kind != session.KindProtocol {
			t.Errorf("%s: %+v, want a protocol error", tc.name, rep)
		}
		if !c.ended() {
			t.Errorf("%s: the connection goes on", tc.name)
		}
		c2 := dialRaw(t, s.Socket())
		c2.send(`{"op":"ping","req":1}`)
		c2.want(session.TypeOK, 1, "")
		c2.c.Close()
	}
	// A line of exactly MaxLine bytes is not a framing error.
	c.send(`{"op":"ping","req":40}` + strings.Repeat(" ", session.MaxLine-len(`{"op":"ping","req":40}`)))
	c.want(session.TypeOK, 40, "")
	if !s.Alive() {
		t.Error("the session ended")
	}
}

// TestDisconnect: a client's execs end with its connection, but for the
// detached ones, which a later connection may wait for.
func TestDisconnect(t *testing.T) {
	s := listening(t, "disconnect")
	c := dialRaw(t, s.Socket())
	tied, det, piped := marker(100), marker(100), marker(100)
	c.send(fmt.Sprintf(`{"op":"exec","req":1,"args":["sleep","%s"]}`, tied))
	c.want(session.TypeStarted, 1, "")
	c.send(fmt.Sprintf(`{"op":"exec","req":2,"args":["sleep","%s"],"detach":true,"stdout":"null","stderr":"null"}`, det))
	detProc := c.want(session.TypeStarted, 2, "").Proc
	c.send(fmt.Sprintf(`{"op":"exec","req":3,"args":["sh","-c","cat; sleep %s"],"stdin":"pipe"}`, piped))
	c.want(session.TypeStarted, 3, "")
	if !eventually(2*time.Second, func() bool { return len(procsWith(tied)) == 1 && len(procsWith(det)) == 1 }) {
		t.Fatalf("the sleeps do not run: %v %v", procsWith(tied), procsWith(det))
	}
	c.c.Close()

	for _, m := range []string{tied, piped} {
		if !eventually(3*time.Second, func() bool { return len(procsWith(m)) == 0 }) {
			t.Errorf("sleep %s of the closed connection runs on", m)
		}
	}
	r := s.run(t, session.ExecRequest{Args: []string{"pgrep", "-f", "sleep " + tied}})
	if r.Code != 1 {
		t.Errorf("pgrep in the session after the disconnect: %+v %q", r.ExitInfo, r.out)
	}
	if len(procsWith(det)) != 1 {
		t.Fatalf("the detached sleep did not survive the disconnect")
	}
	st := s.State()
	if len(st.Processes) != 1 || st.Processes[0].Proc != detProc || !st.Processes[0].Running {
		t.Errorf("state after the disconnect: %+v", st.Processes)
	}

	// A new connection waits for the detached process and signals it.
	c = dialRaw(t, s.Socket())
	c.send(fmt.Sprintf(`{"op":"wait","req":1,"proc":%q}`, detProc))
	c.send(fmt.Sprintf(`{"op":"signal","req":2,"proc":%q,"signal":"SIGTERM"}`, detProc))
	c.want(session.TypeOK, 2, "")
	if rep := c.want(session.TypeExit, 1, ""); rep.Proc != detProc || rep.ExitInfo == nil || rep.Signal != 15 {
		t.Errorf("wait for the detached process: %+v", rep)
	}
	// Once waited for, it is forgotten.
	c.send(fmt.Sprintf(`{"op":"wait","req":3,"proc":%q}`, detProc))
	c.want(session.TypeError, 3, session.KindNotFound)
	if len(s.State().Processes) != 0 {
		t.Errorf("state after the wait: %+v", s.State().Processes)
	}
}

// helperCmd is the test binary run as the dial helper on path.
func helperCmd(bin, path string) *exec.Cmd {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=dial "+path)
	return cmd
}

// TestPeerCheck: only processes of the session's uid in its PID
// namespace are served.
func TestPeerCheck(t *testing.T) {
	s := listening(t, "peers")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := helperCmd(self, s.Socket()).Output(); err != nil || string(out) != "hello\n" {
		t.Fatalf("the helper as this process's user: %q %v", out, err)
	}

	t.Run("other uid", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to run a process of another uid")
		}
		// The socket is opened to everyone: only the server's check
		// refuses.
		for _, p := range []string{s.dir, filepath.Dir(s.Socket())} {
			if err := os.Chmod(p, 0o711); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(p, 0o700)
		}
		if err := os.Chmod(s.Socket(), 0o666); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(s.Socket(), 0o600)
		bin := filepath.Join(shortTemp(t, "bin"), "helper")
		copyFile(t, self, bin)
		if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := helperCmd(bin, s.Socket())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.Output(); err != nil || string(out) != "refused\n" {
			t.Errorf("a peer of uid 65534: %q %v, want refused", out, err)
		}
	})

	t.Run("other PID namespace", func(t *testing.T) {
		cmd := helperCmd(self, s.Socket())
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		if os.Geteuid() != 0 {
			// The same uid outside, through a user namespace of our own.
			cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
		out, err := cmd.Output()
		if err != nil && strings.Contains(err.Error(), "operation not permitted") {
			t.Skipf("no PID namespace here: %v", err)
		}
		if err != nil || string(out) != "refused\n" {
			t.Errorf("a peer in another PID namespace: %q %v, want refused", out, err)
		}
	})

	t.Run("inside a sandbox", func(t *testing.T) {
		// A session whose state directory lies in its own workspace: the
		// socket is on a path the sandbox sees, yet nothing inside is
		// served. As root the sandbox runs as another uid; otherwise it
		// is this uid in another PID namespace.
		ws := shortTemp(t, "w")
		in := open(t, opts{id: "inside", listen: true, ws: ws, stateDir: filepath.Join(ws, "st")})
		copyFile(t, self, filepath.Join(ws, "helper"))
		rel, err := filepath.Rel(ws, in.Socket())
		if err != nil {
			t.Fatal(err)
		}
		r := in.run(t, session.ExecRequest{Args: []string{"/workspace/helper"}, Env: []string{helperEnv + "=dial /workspace/" + rel}})
		if r.Code != 0 || r.out != "refused\n" {
			t.Errorf("a peer inside the session's sandbox: %+v %q %q, want refused", r.ExitInfo, r.out, r.err)
		}
		if out, err := helperCmd(self, in.Socket()).Output(); err != nil || string(out) != "hello\n" {
			t.Errorf("the helper outside: %q %v", out, err)
		}
	})
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestDeleteOverProtocol: delete replies once the session is gone: its
// socket, record, init and processes.
func TestDeleteOverProtocol(t *testing.T) {
	s := listening(t, "delete")
	m := marker(1000)
	if info, _ := s.sh(t, "sleep "+m+" >/dev/null 2>&1 &"); info.Code != 0 {
		t.Fatal(info)
	}
	if _, err := lifecycle.Load(s.dir, "delete"); err != nil {
		t.Fatalf("the record: %v", err)
	}
	pid := s.State().Pid
	other := dial(t, s)
	c := dialRaw(t, s.Socket())
	c.send(`{"op":"delete","req":9}`)
	c.want(session.TypeOK, 9, "")
	if !c.ended() {
		t.Error("the connection goes on after delete")
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done is not closed after delete")
	}
	if s.Alive() {
		t.Error("Alive after delete")
	}
	if _, err := os.Lstat(s.Socket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket after delete: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(s.Socket())); len(ents) != 0 {
		t.Errorf("left in the socket directory: %v", ents)
	}
	if _, err := lifecycle.Load(s.dir, "delete"); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Errorf("Load after delete: %v, want ErrNotFound", err)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("the init %d after delete: %v", pid, err)
	}
	if len(procsWith(m)) != 0 {
		t.Errorf("a background process outlived delete")
	}
	select {
	case <-other.Done():
	case <-time.After(5 * time.Second):
		t.Error("another connection goes on after delete")
	}
	if err := other.Ping(context.Background()); !errors.Is(err, session.ErrClosed) {
		t.Errorf("ping on another connection after delete: %v", err)
	}
	if _, err := session.Dial(context.Background(), s.Socket()); err == nil {
		t.Error("Dial after delete succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after delete: %v", err)
	}
}

// TestSocketUnreachableInside: nothing in a sandbox finds or reaches the
// session's socket, with the host's network too.
func TestSocketUnreachableInside(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, net := range []agentrun.NetworkMode{agentrun.NetworkNone, agentrun.NetworkHost} {
		t.Run(string(net), func(t *testing.T) {
			s := open(t, opts{id: "unreach-" + string(net), listen: true, network: net})
			copyFile(t, self, filepath.Join(s.ws, "helper"))
			base := filepath.Base(s.Socket())
			// The host's /usr, bound read-only, holds no state of ours.
			info, found := s.sh(t, `find / \( -path /proc -o -path /sys -o -path /usr \) -prune -o -type s -print 2>/dev/null; true`)
			if info.Code != 0 || strings.Contains(found, base) || strings.Contains(found, s.dir) {
				t.Errorf("find shows the session's socket: %+v %q", info, found)
			}
			if info, out := s.sh(t, "ls -d "+s.dir+" "+filepath.Dir(s.Socket())+" 2>&1"); info.Code == 0 {
				t.Errorf("the state directory is seen inside: %q", out)
			}
			info, units := s.sh(t, "cat /proc/net/unix")
			if info.Code != 0 || !strings.HasPrefix(units, "Num") {
				t.Fatalf("/proc/net/unix: %+v %q", info, units)
			}
			if strings.Contains(units, s.Socket()) {
				t.Errorf("/proc/net/unix inside names the session socket %s", s.Socket())
			}
			if strings.Contains(units, s.dir) {
				t.Logf("/proc/net/unix inside names the state directory (the socket's bound name):\n%s", grepLines(units, s.dir))
				if net == agentrun.NetworkNone {
					t.Errorf("with no network, /proc/net/unix inside shows a host socket")
				}
			}
			for _, name := range ownAbstract(t) {
				if strings.Contains(units, " "+name+"\n") && net == agentrun.NetworkNone {
					t.Errorf("abstract socket %s of this process is seen inside", name)
				}
			}
			for _, p := range []string{s.Socket(), filepath.Dir(s.Socket())} {
				r := s.run(t, session.ExecRequest{Args: []string{"/workspace/helper"}, Env: []string{helperEnv + "=dial " + p}})
				if r.Code != 0 || !strings.HasPrefix(r.out, "error ") {
					t.Errorf("dialing %s inside: %+v %q %q, want an error", p, r.ExitInfo, r.out, r.err)
				}
			}
		})
	}
}

// grepLines returns the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// ownAbstract lists the abstract socket names ("@...") bound by sockets
// this process holds.
func ownAbstract(t testing.TB) []string {
	inodes := map[string]bool{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 8 && inodes[f[6]] && strings.HasPrefix(f[7], "@") {
			names = append(names, f[7])
		}
	}
	return names
}

// TestSlowClient: a client that reads late still gets all of an exec's
// output. The sizes are such that the process ends while the socket is
// full and the rest of its output waits in its pipe, and the client
// reads only after the wait delay has passed.
func TestSlowClient(t *testing.T) {
	s := listening(t, "slow")
	reached := false
	for _, size := range []int{240 << 10, 272 << 10} {
		c := dialRaw(t, s.Socket())
		c.send(fmt.Sprintf(`{"op":"exec","req":1,"shell":"head -c %d /dev/urandom | tee /tmp/f"}`, size))
		c.want(session.TypeStarted, 1, "")
		if eventually(time.Second, func() bool { return s.run(t, session.ExecRequest{Args: []string{"pgrep", "-x", "tee"}}).Code == 1 }) {
			reached = true
		}
		time.Sleep(2 * session.DefaultWaitDelay)
		h := sha256.New()
		var n int
		for {
			rep, payload := c.next()
			if rep.Type == session.TypeData {
				h.Write(payload)
				n += len(payload)
				continue
			}
			if rep.Type != session.TypeExit || rep.Code != 0 {
				t.Fatalf("reply %+v", rep)
			}
			break
		}
		info, out := s.sh(t, "sha256sum < /tmp/f")
		if sum := hex.EncodeToString(h.Sum(nil)); n != size || info.Code != 0 || !strings.HasPrefix(out, sum) {
			t.Errorf("%d of %d bytes arrived (sha256 %s, inside %q)", n, size, sum, out)
		}
		c.c.Close()
	}
	if !reached {
		t.Log("the process never ended before the client read: the case was not reached")
	}
}

// TestEventsOverProtocol: events on a connection carry the request id
// that asked for them, until they are turned off.
func TestEventsOverProtocol(t *testing.T) {
	s := listening(t, "events")
	c := dialRaw(t, s.Socket())
	c.send(`{"op":"events","req":7}`)
	c.want(session.TypeOK, 7, "")
	c.send(`{"op":"exec","req":8,"args":["unshare","-U","true"],"stdout":"null","stderr":"null"}`)
	var violation, exit, ended bool
	var proc string
	for !(violation && exit && ended) {
		rep, _ := c.next()
		switch {
		case rep.Type == session.TypeStarted && rep.Req == 8:
			proc = rep.Proc
		case rep.Type == session.TypeExit && rep.Req == 8:
			ended = true
			if rep.Code == 0 {
				t.Errorf("unshare -U succeeded: %+v", rep.ExitInfo)
			}
		case rep.Type == session.TypeEvent && rep.Req == 7 && rep.Event != nil:
			switch rep.Event.Kind {
			case "violation":
				violation = rep.Event.Action == "unshare"
			case "exit":
				exit = proc != "" && rep.Event.Proc == proc && rep.Event.Exit != nil && rep.Event.Exit.Code != 0
			}
		default:
			t.Fatalf("unexpected %+v", rep)
		}
	}
	c.send(`{"op":"events","req":9,"on":false}`)
	c.want(session.TypeOK, 9, "")
	c.send(`{"op":"exec","req":10,"args":["true"],"stdout":"null","stderr":"null"}`)
	c.want(session.TypeStarted, 10, "")
	c.want(session.TypeExit, 10, "")
	time.Sleep(200 * time.Millisecond)
	c.send(`{"op":"ping","req":11}`)
	c.want(session.TypeOK, 11, "")
}

// TestSessionEndEvent: a subscriber on another connection gets the final
// "state" event when the session is deleted, before its connection ends.
func TestSessionEndEvent(t *testing.T) {
	s := listening(t, "endevent")
	sub := dialRaw(t, s.Socket())
	sub.send(`{"op":"events","req":1}`)
	sub.want(session.TypeOK, 1, "")
	c := dialRaw(t, s.Socket())
	c.send(`{"op":"delete","req":2}`)
	c.want(session.TypeOK, 2, "")
	rep := sub.want(session.TypeEvent, 1, "")
	if rep.Event == nil || rep.Event.Kind != "state" || rep.Event.Status != "stopped" {
		t.Errorf("the last event: %+v", rep.Event)
	}
	if !sub.ended() {
		t.Error("the subscriber's connection goes on after the session ended")
	}
}

// TestDetachedExitKept: the end of a detached exec is kept for a wait
// from another connection after its own connection is gone; a tied
// exec's is not.
func TestDetachedExitKept(t *testing.T) {
	s := listening(t, "detachkept")
	a := dialRaw(t, s.Socket())
	a.send(`{"op":"exec","req":1,"args":["sh","-c","exit 5"],"stdout":"null","stderr":"null","detach":true}`)
	proc := a.want(session.TypeStarted, 1, "").Proc
	a.want(session.TypeExit, 1, "")
	a.c.Close()
	b := dialRaw(t, s.Socket())
	b.send(fmt.Sprintf(`{"op":"wait","req":2,"proc":%q}`, proc))
	if rep := b.want(session.TypeExit, 2, ""); rep.ExitInfo == nil || rep.Code != 5 {
		t.Errorf("wait for the detached exec: %+v", rep.ExitInfo)
	}
	// Taken once: a second wait finds nothing.
	b.send(fmt.Sprintf(`{"op":"wait","req":3,"proc":%q}`, proc))
	b.want(session.TypeError, 3, session.KindNotFound)
	// Control: a tied exec's end goes to its connection alone.
	b.send(`{"op":"exec","req":4,"args":["true"],"stdout":"null","stderr":"null"}`)
	tied := b.want(session.TypeStarted, 4, "").Proc
	b.want(session.TypeExit, 4, "")
	b.send(fmt.Sprintf(`{"op":"wait","req":5,"proc":%q}`, tied))
	b.want(session.TypeError, 5, session.KindNotFound)
}
