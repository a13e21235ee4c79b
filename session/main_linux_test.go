//go:build linux

package session_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/seccomp"
	"github.com/agentrun/agentrun/session"
	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary a helper process: "dial PATH" connects
// to a session socket and prints "hello" when the server greets it,
// "refused" when the server closes the connection without a word, or
// "error ..." when it cannot connect at all.
const helperEnv = "AGENTRUN_SESSION_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(strings.Fields(h)))
	}
	// Holders of transient systemd scopes re-execute the binary.
	nsinit.Dispatch()
	os.Exit(m.Run())
}

func helper(args []string) int {
	if len(args) == 2 && args[0] == "dial" {
		fmt.Println(dialOutcome(args[1]))
		return 0
	}
	if len(args) == 1 && args[0] == "holder" {
		_ = unix.SetNonblock(3, true)
		return session.RunHolder(os.Stdin, os.NewFile(3, "ready"), nil, nil)
	}
	fmt.Println("unknown helper", args)
	return 2
}

// dialOutcome connects to path and says what the server did: "hello",
// "refused" (closed without a word) or "error ...".
func dialOutcome(path string) string {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return "error " + err.Error()
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	switch {
	case err == nil && strings.HasPrefix(line, `{"type":"hello"`):
		return "hello"
	case line == "" && err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		return "refused"
	}
	return fmt.Sprintf("error %q %v", line, err)
}

// cache is every test's filter cache: the default profile compiles once.
var cache = &seccomp.Cache{}

// opts are what a test session differs in.
type opts struct {
	id       string // "" anonymous; the listening tests name theirs
	listen   bool
	network  agentrun.NetworkMode
	stateDir string // "" a fresh private one
	ws       string // "" a fresh one
}

// tsess is a test's session with the directories it was made from.
type tsess struct {
	*session.Host
	ws, dir string
}

// shortTemp is a private directory with a short path (socket paths are
// limited to 107 bytes), removed after the test.
func shortTemp(t testing.TB, pattern string) string {
	t.Helper()
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err = filepath.EvalSymlinks(d)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// open starts a session for the test, or skips where this host or user
// can build no sandbox at all. It is closed after the test.
func open(t testing.TB, o opts) *tsess {
	t.Helper()
	ws := o.ws
	if ws == "" {
		ws = shortTemp(t, "ws")
	}
	dir := o.stateDir
	if dir == "" {
		dir = shortTemp(t, "st")
	}
	p := &agentrun.Policy{Workspace: ws, Network: o.network}
	host, err := agentrun.NewHostInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := agentrun.CompileSession(p, host)
	if err != nil {
		t.Fatal(err)
	}
	h, err := session.Open(context.Background(), session.Config{
		ID: o.id, StateDir: dir, Spec: spec, Listen: o.listen, SeccompCache: cache,
	})
	var se *lifecycle.StepError
	if errors.As(err, &se) && (se.Step == "user namespace" || se.Step == "clone") {
		t.Skipf("no sandbox here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return &tsess{Host: h, ws: ws, dir: dir}
}

// result is a finished exec with what it wrote.
type result struct {
	session.ExitInfo
	out, err string
}

// run runs r to its end, capturing stdout and stderr where r gives no
// writers of its own.
func (s *tsess) run(t testing.TB, r session.ExecRequest) result {
	t.Helper()
	var o, e bytes.Buffer
	if r.Stdout == nil {
		r.Stdout = &o
	}
	if r.Stderr == nil {
		r.Stderr = &e
	}
	p, err := s.Exec(context.Background(), r)
	if err != nil {
		t.Fatalf("exec %q %q: %v", r.Args, r.Shell, err)
	}
	info := p.Wait()
	return result{ExitInfo: info, out: o.String(), err: e.String()}
}

// sh runs a shell line with stdout and stderr merged and returns how it
// ended and what it wrote.
func (s *tsess) sh(t testing.TB, line string) (session.ExitInfo, string) {
	t.Helper()
	var b bytes.Buffer
	r := s.run(t, session.ExecRequest{Shell: line, Stdout: &b, Stderr: &b})
	return r.ExitInfo, b.String()
}

var markers atomic.Int64

// marker is a number unique to this test process, for sleep arguments
// that name a process: "sleep 1000.PPPPPPNNN".
func marker(secs int) string {
	return fmt.Sprintf("%d.%06d%03d", secs, os.Getpid()%1000000, markers.Add(1)%1000)
}

// procsWith lists the host pids whose command line is "sleep M" (the
// NULs of /proc/PID/cmdline read as spaces).
func procsWith(m string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(bytes.TrimRight(bytes.ReplaceAll(b, []byte{0}, []byte{' '}), " ")) == "sleep "+m {
			pids = append(pids, pid)
		}
	}
	return pids
}

// eventually polls cond every 20ms until it holds or d has passed.
func eventually(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fdCount counts the open descriptors of a host process ("self" too).
func fdCount(t testing.TB, pid string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatalf("descriptors of %s: %v", pid, err)
	}
	return len(ents)
}

// vmRSS is a host process's resident set in KiB.
func vmRSS(t testing.TB, pid string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS for %s", pid)
	return 0
}

// errKind is the kind of a *session.Error, "" for another error.
func errKind(err error) string {
	var se *session.Error
	if errors.As(err, &se) {
		return se.Kind
	}
	return ""
}
