//go:build linux

package agentrun

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/session"
)

// newTestSession starts a tied session over a fresh workspace, or skips
// where this host cannot build a sandbox.
func newTestSession(t *testing.T, p *Policy, o SessionOptions) *Session {
	t.Helper()
	if p.Workspace == "" {
		p.Workspace = t.TempDir()
	}
	s, err := NewSession(context.Background(), p, o)
	if noSandbox(err) {
		t.Skipf("no sandbox here (needs user namespaces or root): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustExec(t *testing.T, s *Session, r ExecRequest) *ExecResult {
	t.Helper()
	res, err := s.Exec(context.Background(), r)
	if err != nil {
		t.Fatalf("exec %v %q: %v", r.Args, r.Shell, err)
	}
	return res
}

// TestSessionContract is the contract a Go runner's session interface
// expects: alive until closed, Done closed within a second of Close, a
// second Close harmless, the working directory, resolved paths shared
// both ways with the commands, and a command that works.
func TestSessionContract(t *testing.T) {
	ws := t.TempDir()
	s := newTestSession(t, &Policy{Workspace: ws}, SessionOptions{})
	if !s.Alive() || s.State() != SessionRunning {
		t.Fatalf("a new session: alive %v, state %s", s.Alive(), s.State())
	}
	select {
	case <-s.Done():
		t.Fatal("Done is closed while the session runs")
	default:
	}
	if s.WorkingDir() != "/workspace" {
		t.Errorf("WorkingDir = %q", s.WorkingDir())
	}
	if res := mustExec(t, s, ExecRequest{Shell: "echo hello"}); res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
		t.Fatalf("echo hello: %+v %q", res, res.Stdout)
	}

	hp, err := s.ResolvePath("x")
	if err != nil {
		t.Fatal(err)
	}
	if hp != filepath.Join(ws, "x") {
		t.Errorf(`ResolvePath("x") = %q, want %q`, hp, filepath.Join(ws, "x"))
	}
	if err := os.WriteFile(hp, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := mustExec(t, s, ExecRequest{Args: []string{"cat", "x"}}); string(res.Stdout) != "from the host\n" {
		t.Errorf("cat of a file written through ResolvePath: %+v %q", res, res.Stdout)
	}
	mustExec(t, s, ExecRequest{Shell: "mkdir -p d && echo from the sandbox > d/y"})
	hp, err = s.ResolveWritePath("d/y")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(hp); err != nil || string(b) != "from the sandbox\n" {
		t.Errorf("a file written by a command, read through ResolveWritePath: %q %v", b, err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(time.Second):
		t.Fatal("Done is not closed a second after Close")
	}
	if s.Alive() || s.State() != SessionStopped {
		t.Errorf("a closed session: alive %v, state %s", s.Alive(), s.State())
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if _, err := s.Exec(context.Background(), ExecRequest{Args: []string{"true"}}); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Exec after Close: %v, want ErrSessionClosed", err)
	}
}

// TestSessionResolveRefuses: paths the policy does not bind, symlinks out
// of the workspace and writes to a read-only bind are policy errors.
func TestSessionResolveRefuses(t *testing.T) {
	ws, ro := t.TempDir(), t.TempDir()
	s := newTestSession(t, &Policy{Workspace: ws, Mounts: []Mount{{Source: ro, Dest: "/ro", Mode: MountRO}}}, SessionOptions{})
	mustExec(t, s, ExecRequest{Shell: "ln -s /etc/passwd out; ln -s .. up"})
	for _, c := range []struct {
		path  string
		write bool
	}{{"/etc/passwd", false}, {"/tmp/x", false}, {"out", false}, {"up/x", false}, {"../../etc/shadow", false}, {"/ro/f", true}} {
		_, err := s.resolve(c.path, c.write)
		var pe *session.PathError
		if !errors.Is(err, ErrPolicy) || !errors.As(err, &pe) {
			t.Errorf("resolve %q (write %v): %v, want a policy error", c.path, c.write, err)
		}
	}
	// Positive control: the read-only bind resolves for reading.
	if hp, err := s.ResolvePath("/ro/f"); err != nil || hp != filepath.Join(ro, "f") {
		t.Errorf("ResolvePath of the read-only bind: %q %v", hp, err)
	}
}

// TestSessionExecKinds: env per exec, cwd, stdin, exit codes, the output
// cap, and a timeout told apart from a cancellation, each killing its own
// process group only.
func TestSessionExecKinds(t *testing.T) {
	s := newTestSession(t, &Policy{}, SessionOptions{})
	if res := mustExec(t, s, ExecRequest{Shell: "echo $FOO; export BAR=1", Env: []string{"FOO=foo"}}); string(res.Stdout) != "foo\n" {
		t.Errorf("env: %q", res.Stdout)
	}
	if res := mustExec(t, s, ExecRequest{Shell: "echo ${FOO:-unset} ${BAR:-unset}"}); string(res.Stdout) != "unset unset\n" {
		t.Errorf("an exec saw an earlier one's environment: %q", res.Stdout)
	}
	if res := mustExec(t, s, ExecRequest{Args: []string{"pwd"}, Cwd: "/tmp"}); string(res.Stdout) != "/tmp\n" {
		t.Errorf("cwd: %q", res.Stdout)
	}
	if res := mustExec(t, s, ExecRequest{Args: []string{"cat"}, Stdin: strings.NewReader("in\n")}); string(res.Stdout) != "in\n" {
		t.Errorf("stdin: %q", res.Stdout)
	}
	for want, sh := range map[int]string{7: "exit 7", 137: "kill -9 $$", 127: "no-such-command-here"} {
		if res := mustExec(t, s, ExecRequest{Shell: sh}); res.ExitCode != want {
			t.Errorf("%s: exit %d, want %d", sh, res.ExitCode, want)
		}
	}
	if res := mustExec(t, s, ExecRequest{Shell: "echo out; echo err >&2"}); string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Errorf("stdout and stderr: %q %q", res.Stdout, res.Stderr)
	}
	res := mustExec(t, s, ExecRequest{Shell: "head -c 100000 /dev/zero", MaxOutput: 10})
	if len(res.Stdout) != 10 || !res.StdoutTruncated || res.ExitCode != 0 {
		t.Errorf("output cap: %d bytes, truncated %v, exit %d", len(res.Stdout), res.StdoutTruncated, res.ExitCode)
	}

	mustExec(t, s, ExecRequest{Shell: "sleep 1001 >/dev/null 2>&1 &"})
	start := time.Now()
	res = mustExec(t, s, ExecRequest{Shell: "sleep 1002 & sleep 1003", Timeout: 200 * time.Millisecond})
	if !res.TimedOut || res.Aborted || res.ExitCode != ExitTimeout || time.Since(start) > 5*time.Second {
		t.Errorf("timeout: %+v after %s", res, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := s.Exec(ctx, ExecRequest{Shell: "sleep 1004 & sleep 1005"})
	if !errors.Is(err, context.DeadlineExceeded) || res == nil || !res.Aborted || res.TimedOut {
		t.Errorf("cancelled: %+v %v", res, err)
	}
	res = mustExec(t, s, ExecRequest{Shell: "ps -eo args | grep '^sleep 100' | sort | tr '\\n' ' '"})
	if got := string(res.Stdout); got != "sleep 1001 " {
		t.Errorf("sleeps left after a timeout and a cancellation: %q, want the earlier exec's alone", got)
	}
}

// TestSessionStartProcess: a long-lived process on pipes, as a runner
// keeps an MCP server: it answers line by line, and Close kills it.
func TestSessionStartProcess(t *testing.T) {
	s := newTestSession(t, &Policy{}, SessionOptions{})
	p, err := s.StartProcess(context.Background(), ExecRequest{Args: []string{"sh", "-c", "while read l; do echo got $l; done"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() <= 1 {
		t.Errorf("pid %d", p.Pid())
	}
	buf := make([]byte, 64)
	for _, l := range []string{"a", "b"} {
		if _, err := io.WriteString(p.Stdin(), l+"\n"); err != nil {
			t.Fatal(err)
		}
		n, err := p.Stdout().Read(buf)
		if err != nil || string(buf[:n]) != "got "+l+"\n" {
			t.Fatalf("reply to %s: %q %v", l, buf[:n], err)
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil || res.Signal != int(syscall.SIGTERM) {
		t.Errorf("after SIGTERM: %+v %v", res, err)
	}
	p.Close()

	p, err = s.StartProcess(context.Background(), ExecRequest{Args: []string{"sleep", "1006"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the process")
	}
}

// TestSessionNamed: a named session is listed, attached to through its
// socket, and gone from the list once closed.
func TestSessionNamed(t *testing.T) {
	name := fmt.Sprintf("t%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	s := newTestSession(t, &Policy{}, SessionOptions{Name: name})
	mustExec(t, s, ExecRequest{Shell: "echo kept > /tmp/f"})
	if !listed(t, name) {
		t.Fatalf("%s is not listed", name)
	}
	a, err := AttachSession(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if res := mustExec(t, a, ExecRequest{Args: []string{"cat", "/tmp/f"}}); string(res.Stdout) != "kept\n" {
		t.Errorf("through the socket: %+v %q", res, res.Stdout)
	}
	if a.WorkingDir() != "/workspace" {
		t.Errorf("attached WorkingDir %q", a.WorkingDir())
	}
	// A large output through data frames, byte-exact.
	res := mustExec(t, a, ExecRequest{Shell: "head -c 3000000 /dev/urandom | tee /tmp/big | sha256sum; cat /tmp/big"})
	sum, _, _ := strings.Cut(string(res.Stdout), " ")
	if got := fmt.Sprintf("%x", sha256.Sum256(res.Stdout[len(sum)+4:])); got != sum {
		t.Errorf("3 MB through the socket: sha256 %s, want %s (%d bytes)", got, sum, len(res.Stdout))
	}
	if err := a.Detach(); err != nil {
		t.Fatal(err)
	}
	if !s.Alive() {
		t.Fatal("detaching a client ended the session")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if listed(t, name) {
		t.Errorf("%s is listed after Close", name)
	}
	if _, err := AttachSession(context.Background(), name); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Errorf("attach after Close: %v", err)
	}
}

func listed(t *testing.T, name string) bool {
	t.Helper()
	list, err := ListSessions()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Name == name && s.State == SessionRunning {
			return true
		}
	}
	return false
}

// TestSessionPersistent: a persistent session is held by the agentrun
// binary, outlives the handle that made it, and is deleted by Close.
func TestSessionPersistent(t *testing.T) {
	rt, err := filepath.Abs("bin/agentrun")
	if err == nil {
		_, err = os.Stat(rt)
	}
	if err != nil {
		t.Skipf("needs the agentrun binary (make build): %v", err)
	}
	name := fmt.Sprintf("p%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	s, err := NewSession(context.Background(), &Policy{Workspace: t.TempDir()}, SessionOptions{Name: name, Persistent: true, Runtime: rt})
	if noSandbox(err) {
		t.Skipf("no sandbox here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command(rt, "delete", "-f", name).Run() })
	mustExec(t, s, ExecRequest{Shell: "sleep 1007 >/dev/null 2>&1 & echo x > /tmp/f"})
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	a, err := AttachSession(context.Background(), name)
	if err != nil {
		t.Fatalf("attach after the first handle let go: %v", err)
	}
	if res := mustExec(t, a, ExecRequest{Shell: "cat /tmp/f; pgrep -x sleep >/dev/null && echo alive"}); string(res.Stdout) != "x\nalive\n" {
		t.Errorf("state kept across handles: %q", res.Stdout)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if listed(t, name) {
		t.Errorf("%s is listed after Close", name)
	}
	if left := procsWith("sleep\x001007"); len(left) != 0 {
		t.Errorf("processes left: %v", left)
	}
}

// TestSessionViolationEvent: a denied call reaches the subscribers, with
// what would allow it.
func TestSessionViolationEvent(t *testing.T) {
	s := newTestSession(t, &Policy{}, SessionOptions{})
	got := make(chan SessionEvent, 16)
	cancel, err := s.Subscribe(func(e SessionEvent) { got <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	mustExec(t, s, ExecRequest{Shell: "unshare -U true 2>/dev/null; exit 0"})
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e := <-got:
			if e.Kind == "violation" && e.Action == "unshare" {
				if e.Suggestion == "" {
					t.Errorf("a violation without a suggestion: %+v", e)
				}
				return
			}
		case <-deadline:
			t.Fatal("no violation event for unshare")
		}
	}
}

// TestPool: sessions taken from a pool are fresh (nothing of another
// taker's), work, and are refilled; Close of the pool deletes its stock.
func TestPool(t *testing.T) {
	pl, err := NewPool(context.Background(), &Policy{Workspace: t.TempDir()}, PoolOptions{Size: 2})
	if noSandbox(err) {
		t.Skipf("no sandbox here (needs user namespaces or root): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for i := 0; i < 5; i++ {
		s, err := pl.Take(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		res := mustExec(t, s, ExecRequest{Shell: "test -e /tmp/mark && echo reused; touch /tmp/mark; echo ok"})
		if string(res.Stdout) != "ok\n" {
			t.Errorf("take %d: %q", i, res.Stdout)
		}
		pids = append(pids, fmt.Sprint(s.b.(localBackend).h.State().Pid))
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Errorf("Close of a pool's session took %s; it should return at once", d)
		}
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pl.Take(context.Background()); !errors.Is(err, ErrPoolClosed) {
		t.Errorf("Take after Close: %v", err)
	}
	// Every init is gone soon after: the taken ones closed in the
	// background, the stock by Close.
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for exists("/proc/"+pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if exists("/proc/" + pid) {
			t.Errorf("the init %s of a closed session is still there", pid)
		}
	}
}

// TestPoolRefusesPolicy: a policy the host cannot enforce fails NewPool.
func TestPoolRefusesPolicy(t *testing.T) {
	_, err := NewPool(context.Background(), &Policy{Workspace: t.TempDir(), Network: "bogus"}, PoolOptions{})
	var se *SetupError
	if !errors.As(err, &se) || !errors.Is(err, ErrPolicy) {
		t.Errorf("NewPool with a bad network mode: %v", err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestSessionTTY: a command on a terminal, in this process and through an
// attached session: a real tty in the foreground of its own session, of
// the size asked for and resized; input, and Ctrl-C from the terminal.
func TestSessionTTY(t *testing.T) {
	name := fmt.Sprintf("tty%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	s := newTestSession(t, &Policy{}, SessionOptions{Name: name})
	a, err := AttachSession(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Detach()
	for _, c := range []struct {
		what string
		s    *Session
	}{{"local", s}, {"attached", a}} {
		t.Run(c.what, func(t *testing.T) {
			res := mustExec(t, c.s, ExecRequest{Shell: "tty; stty size; ps -o stat= -p $$", TTY: &Winsize{Rows: 30, Cols: 90}})
			out := strings.Fields(string(res.Stdout))
			if res.ExitCode != 0 || len(out) != 4 || !strings.HasPrefix(out[0], "/dev/pts/") || out[1] != "30" || out[2] != "90" ||
				!strings.Contains(out[3], "s") || !strings.Contains(out[3], "+") || len(res.Stderr) != 0 {
				t.Errorf("on a terminal: %+v %q", res, res.Stdout)
			}

			p, err := c.s.StartProcess(context.Background(), ExecRequest{Shell: "read x; echo got:$x; stty size", TTY: &Winsize{Rows: 10, Cols: 20}})
			if err != nil {
				t.Fatal(err)
			}
			if p.Stderr() != nil {
				t.Error("a process on a terminal has a stderr pipe")
			}
			if err := p.Resize(Winsize{Rows: 40, Cols: 100}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(p.Stdin(), "hello\n"); err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(p.Stdout())
			if got := strings.ReplaceAll(string(b), "\r\n", "\n"); !strings.Contains(got, "got:hello\n") || !strings.Contains(got, "40 100\n") {
				t.Errorf("input and resize: %q", got)
			}
			if res, err := p.Wait(); err != nil || res.ExitCode != 0 {
				t.Errorf("the process on a terminal: %+v %v", res, err)
			}
			p.Close()

			// Ctrl-C reaches the foreground process group through the
			// terminal's line discipline.
			p, err = c.s.StartProcess(context.Background(), ExecRequest{Args: []string{"sleep", "1008"}, TTY: &Winsize{Rows: 24, Cols: 80}})
			if err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, p.Stdout())
			time.Sleep(100 * time.Millisecond)
			if _, err := io.WriteString(p.Stdin(), "\x03"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("Ctrl-C on the terminal did not end sleep")
			}
			if res, _ := p.Wait(); res.Signal != int(syscall.SIGINT) {
				t.Errorf("after Ctrl-C: %+v", res)
			}
			p.Close()
		})
	}
}

// TestSessionFailed: a session whose init dies without a Close is failed,
// in this process and to an attached handle; one closed is stopped.
func TestSessionFailed(t *testing.T) {
	name := fmt.Sprintf("fail%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	s := newTestSession(t, &Policy{}, SessionOptions{Name: name})
	a, err := AttachSession(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Detach()
	pid := s.b.(localBackend).h.State().Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Session{s, a} {
		select {
		case <-h.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done is not closed after the init was killed")
		}
		if st := h.State(); st != SessionFailed {
			t.Errorf("after the init was killed: %s, want failed", st)
		}
	}
	// Positive control: a Close makes it stopped.
	c := newTestSession(t, &Policy{}, SessionOptions{})
	c.Close()
	if st := c.State(); st != SessionStopped {
		t.Errorf("after Close: %s, want stopped", st)
	}
}

// TestSessionSubscribeCancel: on an attached session, two subscribers
// both get events, and one that cancels gets no more.
func TestSessionSubscribeCancel(t *testing.T) {
	name := fmt.Sprintf("sub%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	newTestSession(t, &Policy{}, SessionOptions{Name: name})
	a, err := AttachSession(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Detach()
	var one, two = make(chan SessionEvent, 16), make(chan SessionEvent, 16)
	cancelOne, err := a.Subscribe(func(e SessionEvent) { one <- e })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Subscribe(func(e SessionEvent) { two <- e }); err != nil {
		t.Fatal(err)
	}
	exitOf := func(ch chan SessionEvent) bool {
		for {
			select {
			case e := <-ch:
				if e.Kind == "exit" {
					return true
				}
			case <-time.After(2 * time.Second):
				return false
			}
		}
	}
	mustExec(t, a, ExecRequest{Args: []string{"true"}})
	if !exitOf(one) || !exitOf(two) {
		t.Fatal("both subscribers should see the exit")
	}
	cancelOne()
	mustExec(t, a, ExecRequest{Args: []string{"true"}})
	if !exitOf(two) {
		t.Error("the remaining subscriber should see the second exit")
	}
	if exitOf(one) {
		t.Error("a cancelled subscriber still gets events")
	}
}
