//go:build linux && cgo

package nsinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/nsinit/internal/cinit"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// serveHelperEnv makes the test binary a helper: "attack" runs inside a
// serving sandbox and tries to reach its init; "own" (on the host) makes
// a serving sandbox, starts a background marker process in it, says
// "ready" and blocks until it is killed.
const serveHelperEnv = "AGENTRUN_SERVE_HELPER"

func TestMain(m *testing.M) {
	switch h := strings.Fields(os.Getenv(serveHelperEnv)); {
	case len(h) == 1 && h[0] == "attack":
		os.Exit(attackInit())
	case len(h) == 2 && h[0] == "own":
		os.Exit(ownSession(h[1]))
	}
	code := m.Run()
	if dir, err := attacker(); err == nil {
		os.RemoveAll(filepath.Dir(dir))
	}
	os.Exit(code)
}

// attacker is a copy of this test binary that a sandbox's uid may read
// (as root that uid is not root's, and the build directory is private).
var attacker = sync.OnceValues(func() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "agentrun-serve-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "attacker")
	return path, os.WriteFile(path, b, 0o755)
})

// attackInit tries, from inside the sandbox, everything that would give
// it the init's control channel or memory, and prints what each got.
func attackInit() int {
	try := func(name string, err error) { fmt.Printf("%s: %v\n", name, errnoOf(err)) }
	try("ptrace-attach", unix.PtraceAttach(1))
	_, err := os.Open("/proc/1/fd/3")
	try("open-fd3", err)
	_, err = os.ReadDir("/proc/1/fd")
	try("readdir-fd", err)
	_, err = os.Open("/proc/1/mem")
	try("open-mem", err)
	_, err = os.Open("/proc/1/environ")
	try("open-environ", err)
	if pidfd, err := unix.PidfdOpen(1, 0); err != nil {
		try("pidfd-getfd", err)
	} else {
		_, err := unix.PidfdGetfd(pidfd, 3, 0)
		try("pidfd-getfd", err)
	}
	// Positive controls: the same calls on itself work.
	_, err = os.Open("/proc/self/mem")
	try("own-mem", err)
	_, err = os.ReadDir("/proc/self/fd")
	try("own-fd", err)
	return 0
}

func errnoOf(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		return e.Error()
	}
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// ownSession is the "own" helper: it holds a serving sandbox whose
// background process carries marker.
func ownSession(marker string) int {
	spec := serveSpec(nil)
	p, err := Start(&Config{Spec: spec, Serve: true})
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	c, err := p.Exec(ExecSpec{Args: []string{"/bin/sh", "-c", "sleep " + marker + " >/dev/null 2>&1 &"}, Env: spec.Process.Env})
	if err != nil {
		fmt.Println("exec:", err)
		return 1
	}
	if exit, err := c.Exit(); err != nil || exit.Code != 0 {
		fmt.Println("exit:", exit, err)
		return 1
	}
	fmt.Println("ready", p.Pid())
	select {}
}

// serveSpec is testSpec for a serving sandbox: no command, the default
// filter, and this test binary at /attacker.
func serveSpec(t testing.TB) *specs.Spec {
	s := testSpec(t)
	s.Process.Args = nil
	s.Linux.Seccomp = seccomp.DefaultProfile()
	// A shell's background job reads /dev/null.
	s.Mounts = append(s.Mounts, specs.Mount{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755", "size=64k"}})
	s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: "/dev/null", Type: "c", Major: 1, Minor: 3})
	if exe, err := attacker(); err == nil {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/attacker", Type: "bind", Source: exe, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	return s
}

// startServe starts a serving sandbox that the test's end kills.
func startServe(t *testing.T, spec *specs.Spec) *Process {
	t.Helper()
	skipWithoutUserns(t)
	p, err := Start(&Config{Spec: spec, Serve: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		p.Wait()
	})
	return p
}

type execResult struct {
	exit           Exit
	stdout, stderr string
}

// run execs x with stdout and stderr pipes (and stdin, unless nil) and
// waits for it and for its output.
func run(t *testing.T, p *Process, x ExecSpec, stdin *string) execResult {
	t.Helper()
	if x.Env == nil {
		x.Env = []string{"PATH=/usr/bin:/bin"}
	}
	var closeAfter []*os.File
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	x.Stdout, x.Stderr = outW, errW
	closeAfter = append(closeAfter, outW, errW)
	if stdin != nil {
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		x.Stdin = inR
		closeAfter = append(closeAfter, inR)
		go func() {
			io.WriteString(inW, *stdin)
			inW.Close()
		}()
	}
	c, err := p.Exec(x)
	for _, f := range closeAfter {
		f.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		t.Fatalf("exec %q: %v", x.Args, err)
	}
	var wg sync.WaitGroup
	var out, errOut []byte
	wg.Add(2)
	go func() { defer wg.Done(); out, _ = io.ReadAll(outR); outR.Close() }()
	go func() { defer wg.Done(); errOut, _ = io.ReadAll(errR); errR.Close() }()
	exit, err := c.Exit()
	wg.Wait()
	if err != nil {
		t.Fatalf("exec %q: %v", x.Args, err)
	}
	return execResult{exit: exit, stdout: string(out), stderr: string(errOut)}
}

func sh(script string) ExecSpec { return ExecSpec{Args: []string{"/bin/sh", "-c", script}} }

// TestServeOutcomes: exit codes and signals come back exactly, as do
// the shell's statuses for a command not found or not executable, and
// stdio works both ways.
func TestServeOutcomes(t *testing.T) {
	p := startServe(t, serveSpec(t))
	cases := []struct {
		name       string
		x          ExecSpec
		code, sig  int
		stderrPart string
	}{
		{"exit 7", sh("exit 7"), 7, 0, ""},
		{"killed by SIGTERM", sh("kill -TERM $$"), 128 + 15, 15, ""},
		{"killed by SIGKILL", sh("kill -KILL $$"), 128 + 9, 9, ""},
		{"not found", ExecSpec{Args: []string{"no-such-command"}}, 127, 0, "no-such-command: command not found"},
		{"not found by path", ExecSpec{Args: []string{"/no/such"}}, 127, 0, "no such file or directory"},
		{"not executable", ExecSpec{Args: []string{"/proc/self/status"}}, 126, 0, "permission denied"},
		{"stderr", sh("echo oops >&2; exit 3"), 3, 0, "oops"},
	}
	for _, c := range cases {
		r := run(t, p, c.x, nil)
		if r.exit.Code != c.code || r.exit.Signal != c.sig || !strings.Contains(r.stderr, c.stderrPart) {
			t.Errorf("%s: exit %+v stderr %q, want code %d signal %d and %q", c.name, r.exit, r.stderr, c.code, c.sig, c.stderrPart)
		}
	}
	in := "line one\nline two\n"
	if r := run(t, p, ExecSpec{Args: []string{"cat"}}, &in); r.stdout != in || r.exit.Code != 0 {
		t.Errorf("cat echoed %q (exit %+v), want %q", r.stdout, r.exit, in)
	}
}

// TestServeConfined: an exec'd process is as confined as a spawned
// command, and cannot reach the init: no capabilities, no_new_privs, the
// filter (no user namespace, no setuid bit), only fds 0-2, no ptrace,
// fds or memory of PID 1. Positive controls alongside.
func TestServeConfined(t *testing.T) {
	p := startServe(t, serveSpec(t))
	r := run(t, p, sh("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; id -u"), nil)
	for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the exec's status lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.HasSuffix(r.stdout, "\n0\n") {
		t.Error("the exec runs as uid 0")
	}
	r = run(t, p, sh("grep -E '^(Threads|NoNewPrivs|Seccomp|CapEff):' /proc/1/status"), nil)
	for _, want := range []string{"Threads:\t1", "NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the init's status lacks %q:\n%s", want, r.stdout)
		}
	}

	r = run(t, p, sh("unshare -U true && echo unshared"), nil)
	if r.exit.Code == 0 || strings.Contains(r.stdout, "unshared") {
		t.Errorf("unshare -U in an exec: exit %+v %q %q", r.exit, r.stdout, r.stderr)
	}
	r = run(t, p, sh("touch /tmp/f && chmod u+x /tmp/f && echo plain-ok && chmod u+s /tmp/f && echo setuid"), nil)
	if !strings.Contains(r.stdout, "plain-ok") || strings.Contains(r.stdout, "setuid") {
		t.Errorf("chmod in an exec: %q %q, want a plain chmod to work and u+s to be denied", r.stdout, r.stderr)
	}

	// Another exec holds pipes meanwhile; none of them may show here.
	hold := "hold"
	inR, inW, _ := os.Pipe()
	defer inW.Close()
	holder, err := p.Exec(ExecSpec{Args: []string{"cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Stdin: inR})
	inR.Close()
	if err != nil {
		t.Fatal(err)
	}
	r = run(t, p, sh("ls /proc/self/fd"), &hold)
	// ls holds one more fd, for the directory it reads.
	if fds := strings.Fields(r.stdout); strings.Join(fds, " ") != "0 1 2 3" {
		t.Errorf("fds of an exec: %v, want 0 1 2 and ls's own", fds)
	}
	inW.Close()
	holder.Exit()

	r = run(t, p, ExecSpec{Args: []string{"/attacker"}, Env: []string{serveHelperEnv + "=attack"}}, nil)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			got[k] = v
		}
	}
	for _, k := range []string{"ptrace-attach", "open-fd3", "readdir-fd", "open-mem", "open-environ", "pidfd-getfd"} {
		if v, ok := got[k]; !ok || v == "ok" {
			t.Errorf("%s on PID 1 from an exec: %q (output %q %q)", k, v, r.stdout, r.stderr)
		}
	}
	for _, k := range []string{"own-mem", "own-fd"} {
		if got[k] != "ok" {
			t.Errorf("positive control %s: %q", k, got[k])
		}
	}
}

// TestServeSignalsToInit: what a sandbox process sends PID 1 neither
// ends the session nor disturbs it.
func TestServeSignalsToInit(t *testing.T) {
	p := startServe(t, serveSpec(t))
	r := run(t, p, sh("for s in TERM INT HUP QUIT USR1 USR2 CHLD PIPE ALRM KILL STOP 34 40 64; do kill -s $s 1; done; echo sent"), nil)
	if !strings.Contains(r.stdout, "sent") {
		t.Fatalf("%+v", r)
	}
	for i := 0; i < 3; i++ {
		if r := run(t, p, sh("echo alive"), nil); r.stdout != "alive\n" || r.exit.Code != 0 {
			t.Fatalf("after signals to PID 1: %+v", r)
		}
	}
}

// TestServeIsolation: env and cwd are each exec's own; nothing leaks
// into later execs.
func TestServeIsolation(t *testing.T) {
	p := startServe(t, serveSpec(t))
	r := run(t, p, ExecSpec{Args: []string{"/bin/sh", "-c", "export LEAK=1; cd /usr; env; pwd"}, Cwd: "/tmp",
		Env: []string{"PATH=/usr/bin:/bin", "FIRST=1"}}, nil)
	if !strings.Contains(r.stdout, "FIRST=1") || !strings.HasSuffix(r.stdout, "/usr\n") {
		t.Errorf("first exec: %q", r.stdout)
	}
	r = run(t, p, ExecSpec{Args: []string{"/bin/sh", "-c", "env; pwd"}, Env: []string{"PATH=/usr/bin:/bin", "SECOND=2"}}, nil)
	if strings.Contains(r.stdout, "FIRST") || strings.Contains(r.stdout, "LEAK") || !strings.Contains(r.stdout, "SECOND=2") {
		t.Errorf("second exec's env: %q", r.stdout)
	}
	if !strings.HasSuffix(r.stdout, "\n/\n") {
		t.Errorf("second exec's cwd: %q, want the Spec's /", r.stdout)
	}
	r = run(t, p, ExecSpec{Args: []string{"pwd"}, Cwd: "/tmp"}, nil)
	if r.stdout != "/tmp\n" {
		t.Errorf("cwd /tmp: %q", r.stdout)
	}
	r = run(t, p, ExecSpec{Args: []string{"/usr/bin/env"}, Env: []string{}}, nil)
	if r.stdout != "" || r.exit.Code != 0 {
		t.Errorf("empty env: %+v", r)
	}
	_, err := p.Exec(ExecSpec{Args: []string{"true"}, Cwd: "/no/such/dir", Env: []string{"PATH=/usr/bin"}})
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Step != "chdir /no/such/dir" || !errors.Is(err, unix.ENOENT) {
		t.Errorf("exec in a missing cwd: %v, want an ExecError for chdir with ENOENT", err)
	}
}

// initFDs counts the init's open fds from the host, or -1 where this
// user may not look (it is non-dumpable).
func initFDs(p *Process) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(p.Pid()) + "/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// TestServeMany: 50 sequential and 8 concurrent execs all come back
// right, and the init holds no more fds after than before.
func TestServeMany(t *testing.T) {
	p := startServe(t, serveSpec(t))
	// Counted once the init serves: it reports started before it closes
	// what it needed only to get there (forget_parent).
	if r := run(t, p, sh("exit 0"), nil); r.exit.Code != 0 {
		t.Fatalf("the first exec: %+v", r)
	}
	before := initFDs(p)
	for i := 0; i < 50; i++ {
		r := run(t, p, sh(fmt.Sprintf("echo %d; exit %d", i, i)), nil)
		if r.stdout != fmt.Sprintf("%d\n", i) || r.exit.Code != i {
			t.Fatalf("exec %d: %+v", i, r)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := strings.Repeat(fmt.Sprintf("exec-%d ", i), 2000)
			r := run(t, p, ExecSpec{Args: []string{"/bin/sh", "-c", "sleep 0.1; cat; exit $N"}, Env: []string{"PATH=/usr/bin:/bin", fmt.Sprintf("N=%d", 10+i)}}, &want)
			if r.stdout != want || r.exit.Code != 10+i {
				errs <- fmt.Errorf("concurrent exec %d: exit %+v, %d bytes out", i, r.exit, len(r.stdout))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if after := initFDs(p); before >= 0 && after != before {
		t.Errorf("the init holds %d fds after the execs, %d before", after, before)
	}
}

// hostProcsWith lists the host pids whose command line contains marker.
func hostProcsWith(marker string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// waitGone polls until no host process carries marker.
func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(hostProcsWith(marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes with %s are still there: %v", marker, hostProcsWith(marker))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// uniqueSleep is a sleep argument no other process on the host has.
func uniqueSleep() string {
	return fmt.Sprintf("1000.%06d%03d", os.Getpid()%1000000, time.Now().Nanosecond()%1000)
}

// TestServeBackground: a background process of an exec that ended lives
// on across later execs, and dies with the sandbox.
func TestServeBackground(t *testing.T) {
	skipWithoutUserns(t)
	p, err := Start(&Config{Spec: serveSpec(t), Serve: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	marker := uniqueSleep()
	r := run(t, p, sh("sleep "+marker+" >/dev/null 2>&1 & echo $!"), nil)
	if r.exit.Code != 0 {
		t.Fatalf("%+v", r)
	}
	bg := strings.TrimSpace(r.stdout)
	for i := 0; i < 3; i++ {
		if r := run(t, p, sh("kill -0 "+bg+" && echo alive"), nil); r.stdout != "alive\n" {
			t.Fatalf("the background process %s is gone after its exec ended: %+v", bg, r)
		}
	}
	if len(hostProcsWith(marker)) != 1 {
		t.Fatalf("host processes with the marker: %v, want one", hostProcsWith(marker))
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if exit, err := p.Wait(); err != nil || exit.Signal != int(unix.SIGKILL) {
		t.Errorf("Wait: %+v %v, want the init killed", exit, err)
	}
	waitGone(t, marker)
}

// TestServeSignals: an exec, its group, and every process of the sandbox
// can be signalled; a reaped exec cannot be.
func TestServeSignals(t *testing.T) {
	p := startServe(t, serveSpec(t))
	env := []string{"PATH=/usr/bin:/bin"}
	c, err := p.Exec(ExecSpec{Args: []string{"sleep", "100"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if c.Pid() <= 1 || c.Pidfd() == nil {
		t.Errorf("pid %d pidfd %v, want a pid in the sandbox and a pidfd", c.Pid(), c.Pidfd())
	}
	if err := c.Signal(unix.SIGTERM, false); err != nil {
		t.Fatal(err)
	}
	if exit, err := c.Exit(); err != nil || exit.Signal != 15 || exit.Code != 143 {
		t.Errorf("after SIGTERM: %+v %v", exit, err)
	}
	if err := c.Signal(unix.SIGTERM, false); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal to a reaped exec: %v, want ErrProcessDone", err)
	}

	// The group: the shell and its background job.
	marker := uniqueSleep()
	c, err = p.Exec(ExecSpec{Args: []string{"/bin/sh", "-c", "sleep " + marker + " & wait"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	for len(hostProcsWith(marker)) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Signal(unix.SIGKILL, true); err != nil {
		t.Fatal(err)
	}
	if exit, _ := c.Exit(); exit.Signal != 9 {
		t.Errorf("after a group SIGKILL: %+v", exit)
	}
	waitGone(t, marker)

	// SignalAll reaches background processes of ended execs too.
	marker = uniqueSleep()
	if r := run(t, p, sh("sleep "+marker+" >/dev/null 2>&1 &"), nil); r.exit.Code != 0 {
		t.Fatal(r)
	}
	c, err = p.Exec(ExecSpec{Args: []string{"sleep", "100"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SignalAll(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit, _ := c.Exit(); exit.Signal != 15 {
		t.Errorf("after SignalAll: %+v", exit)
	}
	waitGone(t, marker)
	if r := run(t, p, sh("echo alive"), nil); r.stdout != "alive\n" {
		t.Errorf("the session after SignalAll: %+v", r)
	}
	if err := p.SignalAll(unix.SIGTERM); err != nil {
		t.Errorf("SignalAll with nothing to signal: %v", err)
	}
}

// sendRaw sends b as a request with id and fds, and returns the init's
// refusal as an *ExecError, or another error.
func (p *Process) sendRaw(b []byte, id uint64, fds []int) error {
	s := p.serve
	c := &call{reply: make(chan report, 1)}
	s.mu.Lock()
	s.calls[id] = c
	s.mu.Unlock()
	if err := s.send(b, fds); err != nil {
		s.drop(id)
		return err
	}
	var rep report
	var ok bool
	select {
	case rep, ok = <-c.reply:
	case <-time.After(10 * time.Second):
		return errors.New("no reply in 10 s")
	}
	switch {
	case !ok:
		return ErrSessionGone
	case rep.Type == repExecError:
		return &ExecError{Step: rep.Step, Errno: unix.Errno(rep.Errno), Msg: rep.Error}
	}
	return fmt.Errorf("unexpected reply %q", rep.Type)
}

// TestServeMalformed: malformed requests get an error, their fds are
// closed, and the session goes on.
func TestServeMalformed(t *testing.T) {
	p := startServe(t, serveSpec(t))
	// The fd count below is the serving init's (see TestServeMany).
	if r := run(t, p, sh("exit 0"), nil); r.exit.Code != 0 {
		t.Fatalf("the first exec: %+v", r)
	}
	const id = 1 << 40 // above the ids Exec uses
	good, err := (&cinit.Request{Type: cinit.ReqExec, ID: id, Argv: []string{"true"}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	null := int(devnull.Fd())
	mut := func(off int, v uint32) []byte {
		b := append([]byte(nil), good...)
		b[off], b[off+1], b[off+2], b[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		return b
	}
	before := initFDs(p)
	cases := []struct {
		name string
		b    []byte
		fds  []int
		want unix.Errno
	}{
		{"truncated", good[:len(good)-1], nil, unix.EPROTO},
		{"bad magic", mut(0, 0xdeadbeef), nil, unix.EPROTO},
		{"huge argc", mut(32, 1<<30), nil, unix.E2BIG},
		{"huge strings_len", mut(40, 1<<30), nil, unix.EPROTO},
		{"an fd without its flag", good, []int{null}, unix.EPROTO},
		{"too many fds", mut(24, cinit.ExecFD0), []int{null, null, null, null, null, null, null, null, null, null}, unix.EPROTO},
		{"unknown type", mut(4, 77), nil, unix.EPROTO},
		{"a terminal size without a terminal", mut(44, 24|80<<16), nil, unix.EPROTO},
		{"a terminal and an fd", mut(24, cinit.ExecTTY|cinit.ExecFD0), []int{null}, unix.EINVAL},
	}
	for i, c := range cases {
		// Each its own id: an accepted request's exit comes later.
		b := append([]byte(nil), c.b...)
		if len(b) >= 16 {
			binary.NativeEndian.PutUint64(b[8:], id+uint64(i))
		}
		err := p.sendRaw(b, id+uint64(i), c.fds)
		var ee *ExecError
		if !errors.As(err, &ee) || ee.Errno != c.want || ee.Step != "request" {
			t.Errorf("%s: %v, want a request error with %v", c.name, err, c.want)
		}
	}
	if r := run(t, p, sh("echo alive"), nil); r.stdout != "alive\n" {
		t.Errorf("the session after malformed requests: %+v", r)
	}
	if after := initFDs(p); before >= 0 && after != before {
		t.Errorf("the init holds %d fds after the malformed requests, %d before", after, before)
	}
}

// TestServeTTY: an exec on a terminal has the sandbox's own pty as its
// controlling terminal, in the foreground, at the size asked for; input
// written to the master reaches it.
func TestServeTTY(t *testing.T) {
	spec := serveSpec(t)
	spec.Mounts = append(spec.Mounts,
		specs.Mount{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		specs.Mount{Destination: "/dev/ptmx", Type: mounts.TypeSymlink, Source: "pts/ptmx"})
	p := startServe(t, spec)
	env := []string{"PATH=/usr/bin:/bin"}
	ttyRun := func(script, input string) (string, Exit) {
		t.Helper()
		c, err := p.Exec(ExecSpec{Args: []string{"/bin/sh", "-c", script}, Env: env, TTY: &Winsize{Rows: 33, Cols: 101}})
		if err != nil {
			t.Fatal(err)
		}
		m := c.TTY()
		if m == nil {
			t.Fatal("no terminal master")
		}
		defer m.Close()
		if input != "" {
			if _, err := m.WriteString(input); err != nil {
				t.Fatal(err)
			}
		}
		// The master reads EIO once the last slave fd is closed.
		out, _ := io.ReadAll(m)
		exit, err := c.Exit()
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(out), "\r\n", "\n"), exit
	}
	out, exit := ttyRun("tty; stty size; ps -o stat= -p $$", "")
	lines := strings.Fields(out)
	if exit.Code != 0 || len(lines) != 4 || lines[0] != "/dev/pts/0" || lines[1] != "33" || lines[2] != "101" ||
		!strings.Contains(lines[3], "s") || !strings.Contains(lines[3], "+") {
		t.Errorf("on a terminal: %+v %q, want /dev/pts/0, 33 101, a foreground session leader", exit, out)
	}
	if out, _ := ttyRun("read x; echo got:$x", "hello\n"); !strings.Contains(out, "got:hello") {
		t.Errorf("input through the master: %q", out)
	}
	if _, err := p.Exec(ExecSpec{Args: []string{"true"}, Env: env, TTY: &Winsize{}, Stdout: os.Stderr}); err == nil {
		t.Error("an exec with a terminal and a Stdout was accepted")
	}
	// Positive control: without a terminal, no tty.
	if r := run(t, p, sh("tty"), nil); r.exit.Code == 0 {
		t.Errorf("tty without a terminal: %+v", r)
	}
}

// TestServeGone: once the init is gone, pending execs and new ones fail
// with ErrSessionGone, and Wait reports its end.
func TestServeGone(t *testing.T) {
	skipWithoutUserns(t)
	p, err := Start(&Config{Spec: serveSpec(t), Serve: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Exec(ExecSpec{Args: []string{"/bin/sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if _, err := c.Exit(); !errors.Is(err, ErrSessionGone) {
		t.Errorf("a running exec when the init died: %v", err)
	}
	if exit, err := p.Wait(); err != nil || exit.Signal != 9 {
		t.Errorf("Wait: %+v %v", exit, err)
	}
	if _, err := p.Exec(ExecSpec{Args: []string{"/bin/true"}}); !errors.Is(err, ErrSessionGone) {
		t.Errorf("an exec after the init died: %v", err)
	}
}

// TestServeOwnerKilled: a process that holds a session dies by SIGKILL;
// the sandbox, background processes included, goes with it.
func TestServeOwnerKilled(t *testing.T) {
	skipWithoutUserns(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	marker := uniqueSleep()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), serveHelperEnv+"=own "+marker)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make([]byte, 256)
	n, _ := out.Read(line)
	if !strings.HasPrefix(string(line[:n]), "ready") {
		cmd.Process.Kill()
		rest, _ := io.ReadAll(out)
		t.Fatalf("helper: %s%s", line[:n], rest)
	}
	if len(hostProcsWith(marker)) != 1 {
		t.Fatalf("the background process is not running: %v", hostProcsWith(marker))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitGone(t, marker)
}

// TestServeRefusals: a serving sandbox needs a PID namespace and a
// filter that lets its init serve; Create refuses otherwise.
func TestServeRefusals(t *testing.T) {
	skipWithoutUserns(t)
	spec := serveSpec(t)
	var ns []specs.LinuxNamespace
	for _, n := range spec.Linux.Namespaces {
		if n.Type != specs.PIDNamespace {
			ns = append(ns, n)
		}
	}
	spec.Linux.Namespaces = ns
	var se *StepError
	if _, err := Create(&Config{Spec: spec, Serve: true}); !errors.As(err, &se) || se.Step != "serve" {
		t.Errorf("without a PID namespace: %v", err)
	}
	for _, call := range []string{"setsid", "close_range", "wait4"} {
		spec := serveSpec(t)
		one := uint(1)
		spec.Linux.Seccomp.Syscalls = append(spec.Linux.Seccomp.Syscalls, specs.LinuxSyscall{Names: []string{call}, Action: specs.ActErrno, ErrnoRet: &one})
		// The profile's own rule for it comes first; deny it at the top.
		spec.Linux.Seccomp.Syscalls = append([]specs.LinuxSyscall{spec.Linux.Seccomp.Syscalls[len(spec.Linux.Seccomp.Syscalls)-1]}, spec.Linux.Seccomp.Syscalls[:len(spec.Linux.Seccomp.Syscalls)-1]...)
		_, err := Create(&Config{Spec: spec, Serve: true})
		if !errors.As(err, &se) || se.Step != "seccomp" || !strings.Contains(se.Msg, call) {
			t.Errorf("a profile denying %s: %v", call, err)
		}
	}
	// Positive control: the spawn path is unaffected by the same profile.
	spec = testSpec(t, "/bin/true")
	if r := runSpec(t, spec); r.err != nil || r.exit.Code != 0 {
		t.Errorf("a spawn: %+v", r)
	}
}

// BenchmarkServeExec measures an exec of /bin/true into a serving
// sandbox, stdout on a pipe read to EOF, until its exit is in;
// BenchmarkHostExec is the same through os/exec on the host.
func BenchmarkServeExec(b *testing.B) {
	skipWithoutUserns(b)
	p, err := Start(&Config{Spec: serveSpec(b), Serve: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		p.Kill()
		p.Wait()
	}()
	env := []string{"PATH=/usr/bin:/bin"}
	for i := 0; i < b.N; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		c, err := p.Exec(ExecSpec{Args: []string{"/bin/true"}, Env: env, Stdout: w})
		w.Close()
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, r)
		r.Close()
		if exit, err := c.Exit(); err != nil || exit.Code != 0 {
			b.Fatal(exit, err)
		}
	}
}

func BenchmarkHostExec(b *testing.B) {
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("/bin/true")
		if _, err := cmd.Output(); err != nil {
			b.Fatal(err)
		}
	}
}
