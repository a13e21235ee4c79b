//go:build linux

package integration

// Sessions through the CLI: create, exec, list, state, kill, delete and
// the holder behind them, as a user of the CLI sees them, and what must
// not be possible (another user's sessions, a command inside a session
// reaching its holder, its socket or another session).

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cliCfg describes one agentrun invocation of a session verb.
type cliCfg struct {
	stdin io.Reader
	// stdout, when set, receives the output instead of the buffer.
	stdout io.Writer
	// sys overrides the process attributes (another user's credentials).
	sys *syscall.SysProcAttr
	// env is added to agentrun's environment (PATH and LANG are set).
	env []string
	// guard is the hang guard (default 30 s), not a timing assertion.
	guard time.Duration
}

// startCLI launches agentrun ARGS... with the environment a caller of the
// suite gives (PATH and LANG only); wait collects it.
func startCLI(t *testing.T, c cliCfg, args ...string) *running {
	t.Helper()
	cmd := exec.Command(agentrunBin, args...)
	cmd.Env = append([]string{"PATH=" + sandboxPath, "LANG=C"}, c.env...)
	cmd.Stdin = c.stdin
	cmd.Dir = os.TempDir()
	cmd.SysProcAttr = c.sys
	r := &running{t: t, cmd: cmd, args: args, out: new(bytes.Buffer), errb: new(bytes.Buffer), guard: c.guard, done: make(chan struct{})}
	if r.guard == 0 {
		r.guard = 30 * time.Second
	}
	cmd.Stdout, cmd.Stderr = r.out, r.errb
	if c.stdout != nil {
		cmd.Stdout = c.stdout
	}
	cmd.WaitDelay = 5 * time.Second
	r.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %s: %v", agentrunBin, strings.Join(args, " "), err)
	}
	go func() {
		err := cmd.Wait()
		r.result = runResult{args: args, code: exitCode(cmd, err), stdout: r.out.String(), stderr: r.errb.String(), dur: time.Since(r.start)}
		close(r.done)
	}()
	return r
}

// cli runs agentrun ARGS... to completion as the caller.
func cli(t *testing.T, args ...string) runResult {
	t.Helper()
	return startCLI(t, cliCfg{}, args...).wait()
}

// cliAs runs agentrun ARGS... to completion with the attributes sys (nil:
// the caller).
func cliAs(t *testing.T, sys *syscall.SysProcAttr, args ...string) runResult {
	t.Helper()
	return startCLI(t, cliCfg{sys: sys}, args...).wait()
}

// syncBuf is a Buffer that a test may read while a process writes it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// until polls cond every 20 ms until it holds or guard has passed (a
// hang guard, not a timing assertion), and says whether it held.
func until(guard time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(guard); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// sleepMarker is a unique argument for sleep that names the process on
// the host and in the session (sleep takes fractions).
func sleepMarker() string {
	return fmt.Sprintf("%d.%09d", 900+time.Now().UnixNano()%100, time.Now().UnixNano()%1000000000)
}

// testSession is a session made through the CLI.
type testSession struct {
	id     string
	ws     string
	socket string
	// dir is the state directory of the session's user (the socket's
	// directory's parent).
	dir    string
	pid    int // the init, as create reported it
	holder int
	// as runs the CLI as another user (nil: the caller), with env added
	// to its environment.
	as  *syscall.SysProcAttr
	env []string
}

// sessReady is create --json's output.
type sessReady struct {
	OK     bool   `json:"ok"`
	ID     string `json:"id"`
	Socket string `json:"socket"`
	Pid    int    `json:"pid"`
	Holder int    `json:"holder"`
	Error  string `json:"error"`
}

// procRef is a process as a record names it.
type procRef struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// sessRecord is what the suite reads of a session's record in the state
// directory.
type sessRecord struct {
	ID     string   `json:"id"`
	State  string   `json:"state"`
	Owner  procRef  `json:"owner"`
	Init   *procRef `json:"init"`
	Cgroup []string `json:"cgroup"`
	Serve  bool     `json:"serve"`
	Socket string   `json:"socket"`
}

// sessOpts says how newSession makes a session.
type sessOpts struct {
	// as and env: see testSession.
	as  *syscall.SysProcAttr
	env []string
	// ws is the workspace: a fresh directory when "".
	ws string
	// id: a fresh token when "".
	id    string
	flags []string
}

// newSession creates a session, and deletes it (-f) when the test ends,
// whatever happened.
func newSession(t *testing.T, o sessOpts) *testSession {
	t.Helper()
	if o.ws == "" {
		o.ws = tempDir(t)
	}
	if o.id == "" {
		o.id = token("it-sess-")
	}
	s := &testSession{id: o.id, ws: o.ws, as: o.as, env: o.env}
	t.Cleanup(func() { s.forceDelete(t) })
	args := append([]string{"create", "--json", "--workspace", o.ws}, o.flags...)
	r := s.cli(t, append(args, o.id)...)
	if r.code != 0 {
		t.Fatalf("create: exit %d\n%s", r.code, r)
	}
	var ready sessReady
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &ready); err != nil {
		t.Fatalf("create --json printed %q: %v", r.stdout, err)
	}
	if !ready.OK || ready.ID != o.id || ready.Socket == "" || ready.Pid <= 0 || ready.Holder <= 0 {
		t.Fatalf("create --json: %+v, want ok with the id, a socket, an init pid and a holder pid\n%s", ready, r)
	}
	s.socket, s.pid, s.holder = ready.Socket, ready.Pid, ready.Holder
	s.dir = filepath.Dir(filepath.Dir(ready.Socket))
	return s
}

// cli runs agentrun ARGS... to completion as the session's user, with its
// environment.
func (s *testSession) cli(t *testing.T, args ...string) runResult {
	t.Helper()
	return startCLI(t, cliCfg{sys: s.as, env: s.env}, args...).wait()
}

// forceDelete is the cleanup: delete -f, which may find nothing left.
func (s *testSession) forceDelete(t *testing.T) {
	r := s.cli(t, "delete", "-f", s.id)
	if r.code != 0 && !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("cleanup: delete -f %s: exit %d\n%s", s.id, r.code, r)
	}
}

func (s *testSession) recordPath() string { return filepath.Join(s.dir, s.id+".json") }

// record reads the session's record.
func (s *testSession) record(t *testing.T) sessRecord {
	t.Helper()
	b, err := os.ReadFile(s.recordPath())
	if err != nil {
		t.Fatalf("the record of %s: %v", s.id, err)
	}
	var r sessRecord
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("the record of %s: %v\n%s", s.id, err, b)
	}
	if r.ID != s.id || r.Init == nil || r.Init.PID != s.pid || r.Owner.PID != s.holder || r.Socket != s.socket || !r.Serve {
		t.Fatalf("the record of %s does not match what create said (init %d, holder %d, socket %s):\n%s", s.id, s.pid, s.holder, s.socket, b)
	}
	return r
}

// exec runs agentrun exec [FLAGS] ID -- ARGS... to completion.
func (s *testSession) exec(t *testing.T, flags []string, args ...string) runResult {
	t.Helper()
	return s.startExec(t, cliCfg{}, flags, args...).wait()
}

func (s *testSession) startExec(t *testing.T, c cliCfg, flags []string, args ...string) *running {
	t.Helper()
	if c.sys == nil {
		c.sys = s.as
	}
	c.env = append(c.env, s.env...)
	a := append([]string{"exec"}, flags...)
	a = append(append(a, s.id, "--"), args...)
	return startCLI(t, c, a...)
}

// mustServe asserts that the session still runs commands, with the same
// init.
func (s *testSession) mustServe(t *testing.T, what string) {
	t.Helper()
	r := s.exec(t, nil, "echo", "serving")
	if r.code != 0 || r.stdout != "serving\n" {
		t.Fatalf("%s: the session no longer serves:\n%s", what, r)
	}
	if st := s.state(t); st.Pid != s.pid || st.Status != "running" {
		t.Fatalf("%s: state says pid %d status %q, want the init %d running", what, st.Pid, st.Status, s.pid)
	}
}

// stateOut is the state verb's output.
type stateOut struct {
	OCIVersion string `json:"ociVersion"`
	ID         string `json:"id"`
	Pid        int    `json:"pid"`
	Status     string `json:"status"`
	Socket     string `json:"socket"`
	Processes  []struct {
		Pid     int      `json:"pid"`
		Args    []string `json:"args"`
		Running bool     `json:"running"`
	} `json:"processes"`
}

func (s *testSession) state(t *testing.T) stateOut {
	t.Helper()
	r := s.cli(t, "state", s.id)
	if r.code != 0 {
		t.Fatalf("state: exit %d\n%s", r.code, r)
	}
	var st stateOut
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("state printed no JSON: %v\n%s", err, r)
	}
	return st
}

// listed runs list --format json as sys's user and returns each
// session's status by id.
func listed(t *testing.T, sys *syscall.SysProcAttr, env ...string) map[string]string {
	t.Helper()
	r := startCLI(t, cliCfg{sys: sys, env: env}, "list", "--format", "json").wait()
	if r.code != 0 {
		t.Fatalf("list --format json: exit %d\n%s", r.code, r)
	}
	var l []stateOut
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		t.Fatalf("list --format json printed no JSON list: %v\n%s", err, r)
	}
	out := map[string]string{}
	for _, s := range l {
		out[s.ID] = s.Status
	}
	return out
}

// procAlive says whether the process p still runs (not a zombie), the
// same process (its start time) as the record named.
func procAlive(p procRef) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return err == nil && start == p.Start
}

// leftovers lists what of the session rec describes is still there: the
// record, the socket, the holder, the init, cgroup directories.
func (s *testSession) leftovers(rec sessRecord) []string {
	var left []string
	if exists(s.recordPath()) {
		left = append(left, "record "+s.recordPath())
	}
	if exists(s.socket) {
		left = append(left, "socket "+s.socket)
	}
	if procAlive(rec.Owner) {
		left = append(left, fmt.Sprintf("holder %d", rec.Owner.PID))
	}
	if rec.Init != nil && procAlive(*rec.Init) {
		left = append(left, fmt.Sprintf("init %d", rec.Init.PID))
	}
	for _, cg := range rec.Cgroup {
		if exists(cg) {
			left = append(left, "cgroup "+cg)
		}
	}
	return left
}

// mustBeGone asserts that nothing of the session is left, allowing guard
// for processes to end (a hang guard).
func (s *testSession) mustBeGone(t *testing.T, rec sessRecord, guard time.Duration, what string) {
	t.Helper()
	var left []string
	until(guard, func() bool { left = s.leftovers(rec); return len(left) == 0 })
	if len(left) > 0 {
		t.Errorf("%s: left behind after %v: %s", what, guard, strings.Join(left, "; "))
	}
}

// commandsWith lists the host processes other than agentrun CLIs (whose
// arguments hold the command) that carry marker, as "pid: cmdline".
func commandsWith(marker string) []string {
	var out []string
	for _, p := range hostProcsWith(marker) {
		_, cmdline, _ := strings.Cut(p, ": ")
		if argv0, _, _ := strings.Cut(cmdline, " "); filepath.Base(argv0) != "agentrun" && argv0 != agentrunBin {
			out = append(out, p)
		}
	}
	return out
}

// mustNotRun asserts that no host process carries marker within guard.
func mustNotRun(t *testing.T, marker string, guard time.Duration, what string) {
	t.Helper()
	if !until(guard, func() bool { return len(commandsWith(marker)) == 0 }) {
		t.Errorf("%s: still running after %v: %v", what, guard, commandsWith(marker))
	}
}

// mustRun waits (a hang guard) until a host process carries marker.
func mustRun(t *testing.T, marker string, what string) {
	t.Helper()
	if !until(5*time.Second, func() bool { return len(commandsWith(marker)) > 0 }) {
		t.Fatalf("%s: no process with %q runs on the host", what, marker)
	}
}

// oneLine asserts a one-line error message that names want.
func oneLine(t *testing.T, r runResult, want, what string) {
	t.Helper()
	msg := strings.TrimRight(r.stderr, "\n")
	if msg == "" || strings.Contains(msg, "\n") || !strings.Contains(msg, want) {
		t.Errorf("%s: want one line on stderr naming %q, got:\n%s", what, want, r)
	}
}

// hasTool says whether the host has every tool (the sandbox's /usr is
// the host's).
func hasTool(names ...string) bool {
	for _, n := range names {
		found := false
		for _, d := range filepath.SplitList(sandboxPath) {
			if fi, err := os.Stat(filepath.Join(d, n)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// execModes runs f once for each way agentrun exec goes: the CLI's C
// fast path (cmd/agentrun/internal/fastpath/sessexec.c), which takes a
// plain exec where the state directory is root's or in a private
// $XDG_RUNTIME_DIR, and Go (AGENTRUN_EXEC_FAST=0). env is what the
// session's CLI calls get.
func execModes(t *testing.T, f func(t *testing.T, env []string)) {
	t.Run("fast", func(t *testing.T) {
		var env []string
		if !isRoot() {
			x := tempDir(t)
			if err := os.Chmod(x, 0o700); err != nil {
				t.Fatal(err)
			}
			env = []string{"XDG_RUNTIME_DIR=" + x}
		}
		f(t, env)
	})
	t.Run("go", func(t *testing.T) { f(t, []string{"AGENTRUN_EXEC_FAST=0"}) })
}

// ---------------------------------------------------------------------------

// TestSessionLife walks a session through the CLI: create, exec (files,
// exit status, stdin, a detached process, a dev server), list, state,
// kill and delete, after which nothing of it is left.
func TestSessionLife(t *testing.T) { execModes(t, testSessionLife) }

func testSessionLife(t *testing.T, env []string) {
	ws := tempDir(t)
	writeFile(t, filepath.Join(ws, "hello.txt"), "hello from the workspace\n", 0o644)
	s := newSession(t, sessOpts{ws: ws, env: env})
	if fi, err := os.Lstat(s.socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the socket %s create named: %v", s.socket, err)
	}
	if filepath.Base(filepath.Dir(s.socket)) != "s" {
		t.Errorf("the socket %s is not in the state directory's s/", s.socket)
	}
	rec := s.record(t)
	if !procAlive(*rec.Init) || !procAlive(rec.Owner) {
		t.Fatalf("the init %d or the holder %d does not run", rec.Init.PID, rec.Owner.PID)
	}

	// Files written by one exec are seen by the next.
	mustExit(t, s.exec(t, nil, "sh", "-c", "echo hi >/tmp/x"), 0, "exec: write /tmp/x")
	if r := s.exec(t, nil, "cat", "/tmp/x"); r.code != 0 || r.stdout != "hi\n" {
		t.Errorf("exec cat /tmp/x: want hi, got:\n%s", r)
	}
	if r := s.exec(t, nil, "cat", "/workspace/hello.txt"); r.code != 0 || r.stdout != "hello from the workspace\n" {
		t.Errorf("exec cat /workspace/hello.txt:\n%s", r)
	}
	mustExit(t, s.exec(t, nil, "sh", "-c", "exit 7"), 7, "exec sh -c 'exit 7'")
	if r := s.startExec(t, cliCfg{stdin: strings.NewReader("data through stdin\n")}, nil, "cat").wait(); r.code != 0 || r.stdout != "data through stdin\n" {
		t.Errorf("stdin did not pass through exec:\n%s", r)
	}
	// Output on both streams, kept apart.
	if r := s.exec(t, nil, "sh", "-c", "echo out; echo err >&2"); r.code != 0 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("stdout and stderr of exec:\n%s", r)
	}

	// A detached process returns at once and lives on.
	m := sleepMarker()
	d := s.exec(t, []string{"-d"}, "sleep", m)
	mustExit(t, d, 0, "exec -d sleep")
	if d.dur > 10*time.Second {
		t.Errorf("exec -d took %v: it waited for the command", d.dur)
	}
	mustRun(t, m, "the detached sleep")
	if r := s.exec(t, nil, "ps", "-eo", "args="); !strings.Contains(r.stdout, "sleep "+m) {
		t.Errorf("a later exec does not see the detached sleep:\n%s", r)
	}
	if st := s.state(t); !func() bool {
		for _, p := range st.Processes {
			if strings.Join(p.Args, " ") == "sleep "+m && p.Running {
				return true
			}
		}
		return false
	}() {
		t.Errorf("state does not list the detached sleep as running: %+v", st.Processes)
	}

	// A dev server started detached is reached by a later exec.
	server := false
	switch {
	case !hasTool("python3"):
		t.Log("no python3 on the host: the dev server part is not run")
	default:
		server = true
		mustExit(t, s.exec(t, []string{"-d"}, "python3", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory", "/workspace"), 0, "exec -d python3 -m http.server")
		fetch := `import sys, time, urllib.request
for i in range(200):
    try:
        sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:8080/hello.txt", timeout=2).read().decode())
        sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit(1)`
		args := []string{"python3", "-c", fetch}
		if hasTool("curl") {
			args = []string{"sh", "-c", "for i in $(seq 200); do curl -sf http://127.0.0.1:8080/hello.txt && exit 0; sleep 0.05; done; exit 1"}
		}
		if r := s.exec(t, nil, args...); r.code != 0 || r.stdout != "hello from the workspace\n" {
			t.Errorf("a later exec did not reach the detached dev server:\n%s", r)
		}
	}

	// list and state.
	r := s.cli(t, "list")
	found := false
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == s.id {
			found = true
			if f[1] != strconv.Itoa(s.pid) || f[2] != "running" {
				t.Errorf("list shows %q, want pid %d running", line, s.pid)
			}
		}
	}
	if r.code != 0 || !found || !strings.HasPrefix(r.stdout, "ID") {
		t.Errorf("list does not show %s:\n%s", s.id, r)
	}
	if got := listed(t, nil, env...)[s.id]; got != "running" {
		t.Errorf("list --format json: %s is %q, want running", s.id, got)
	}
	st := s.state(t)
	if st.OCIVersion == "" || st.ID != s.id || st.Status != "running" || st.Pid <= 0 || st.Pid != s.pid || st.Socket != s.socket {
		t.Errorf("state: %+v, want ociVersion, id %s, running, pid %d, socket %s", st, s.id, s.pid, s.socket)
	}

	// kill KILL ends every process of the session but the session.
	mustExit(t, s.cli(t, "kill", s.id, "KILL"), 0, "kill ID KILL")
	mustNotRun(t, m, 5*time.Second, "the detached sleep after kill KILL")
	s.mustServe(t, "after kill KILL")
	if r := s.exec(t, nil, "ps", "-eo", "args="); strings.Contains(r.stdout, m) || (server && strings.Contains(r.stdout, "http.server")) {
		t.Errorf("processes survived kill KILL:\n%s", r)
	}
	// kill with the default signal (TERM) and with a number.
	for _, sig := range [][]string{nil, {"15"}} {
		what := "kill ID " + strings.Join(sig, "")
		mustExit(t, s.exec(t, []string{"-d"}, "sleep", m), 0, "exec -d sleep again")
		mustRun(t, m, "the detached sleep before "+what)
		mustExit(t, s.cli(t, append([]string{"kill", s.id}, sig...)...), 0, what)
		mustNotRun(t, m, 5*time.Second, "the detached sleep after "+what)
		s.mustServe(t, "after "+what)
	}

	// delete leaves nothing.
	rec = s.record(t)
	if isRoot() && len(rec.Cgroup) == 0 {
		t.Logf("note: the session has no cgroup here (record: %+v)", rec)
	}
	for _, cg := range rec.Cgroup {
		if !exists(cg) {
			t.Errorf("the record names the cgroup %s, which does not exist", cg)
		}
	}
	mustExit(t, s.cli(t, "delete", s.id), 0, "delete ID")
	if _, ok := listed(t, nil, env...)[s.id]; ok {
		t.Errorf("list still shows %s after delete", s.id)
	}
	if exists(s.recordPath()) || exists(s.socket) {
		t.Errorf("delete returned with its record (%v) or socket (%v) still there", exists(s.recordPath()), exists(s.socket))
	}
	s.mustBeGone(t, rec, 5*time.Second, "delete")
	r = s.exec(t, nil, "true")
	mustExit(t, r, 125, "exec after delete")
	oneLine(t, r, s.id, "exec after delete")
	if r := s.cli(t, "delete", s.id); r.code == 0 {
		t.Errorf("a second delete succeeded:\n%s", r)
	}
}

// TestSessionDeleteAnswers deletes sessions one after another: each
// delete must report success (its reply must reach the CLI before the
// holder exits) and leave nothing behind.
func TestSessionDeleteAnswers(t *testing.T) {
	ws := tempDir(t)
	for i := range 50 {
		s := newSession(t, sessOpts{ws: ws})
		rec := s.record(t)
		if r := cli(t, "delete", s.id); r.code != 0 {
			t.Errorf("round %d: delete of a live session: exit %d\n%s", i, r.code, r)
		}
		s.mustBeGone(t, rec, 5*time.Second, fmt.Sprintf("round %d: delete", i))
	}
}

// TestSessionBadInput: unknown sessions, IDs in use, invalid IDs, flags
// and signals are refused with a status and a message, and change
// nothing.
func TestSessionBadInput(t *testing.T) {
	unknown := token("it-nosuch-")
	r := cli(t, "exec", unknown, "--", "true")
	mustExit(t, r, 125, "exec of an unknown session")
	oneLine(t, r, unknown, "exec of an unknown session")
	for _, args := range [][]string{{"state", unknown}, {"kill", unknown}, {"kill", unknown, "KILL"}, {"delete", unknown}, {"delete", "-f", unknown}} {
		r := cli(t, args...)
		if r.code == 0 {
			t.Errorf("%q of an unknown session succeeded:\n%s", args, r)
		}
		oneLine(t, r, unknown, strings.Join(args, " "))
	}

	s := newSession(t, sessOpts{})
	rec := s.record(t)
	// Invalid IDs, for every verb: exit 2, a message, nothing made.
	for _, id := range []string{"../x", "", ".hidden", "a/b", "x..y", strings.Repeat("a", 200)} {
		for _, args := range [][]string{
			{"create", "--workspace", s.ws, id}, {"exec", id, "--", "true"}, {"state", id},
			{"kill", id}, {"kill", id, "KILL"}, {"delete", id}, {"delete", "-f", id},
		} {
			r := cli(t, args...)
			if r.code != 2 || strings.TrimSpace(r.stderr) == "" {
				t.Errorf("%s with the invalid ID %q: exit %d, want 2 and a message\n%s", args[0], id, r.code, r)
			}
		}
		for _, p := range []string{filepath.Join(s.dir, id+".json"), filepath.Join(s.dir, "..", "x.json"), filepath.Join(s.dir, "x.json")} {
			if id != "" && exists(p) {
				t.Errorf("the invalid ID %q made %s", id, p)
			}
		}
	}
	if _, ok := listed(t, nil)[""]; ok {
		t.Error("list shows a session with an empty ID")
	}

	// Flags and arguments. (The IDs of creates that should fail are
	// deleted all the same, should they not.)
	ids := []string{token("it-sess-"), token("it-sess-"), token("it-sess-")}
	for _, id := range ids {
		t.Cleanup(func() { (&testSession{id: id}).forceDelete(t) })
	}
	for _, args := range [][]string{
		{"create", "--no-such-flag", ids[0]},
		{"create"},
		{"create", ids[1], ids[2]},
		{"create", "--idle-timeout", "-1s", ids[0]},
		{"exec", "--no-such-flag", s.id, "--", "true"},
		{"exec", s.id},
		{"exec", s.id, "--"},
		{"exec", "--timeout", "-1s", s.id, "--", "true"},
		{"kill", s.id, "NOSUCHSIG"},
		{"kill", s.id, "0"},
		{"kill", s.id, "KILL", "extra"},
		{"list", "--format", "yaml"},
		{"state"},
		{"delete"},
	} {
		r := cli(t, args...)
		if r.code != 2 || strings.TrimSpace(r.stderr) == "" {
			t.Errorf("agentrun %q: exit %d, want 2 and a message\n%s", args, r.code, r)
		}
	}
	s.mustServe(t, "after the bad input")

	// The same ID again: refused, and the first session is untouched.
	r = cli(t, "create", "--workspace", tempDir(t), s.id)
	if r.code == 0 {
		t.Fatalf("create with an ID in use succeeded:\n%s", r)
	}
	oneLine(t, r, s.id, "create with an ID in use")
	if fi, err := os.Lstat(s.socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the first session's socket is gone after a create of its ID: %v", err)
	}
	if again := s.record(t); again.Owner != rec.Owner || *again.Init != *rec.Init {
		t.Errorf("the record changed: %+v, was %+v", again, rec)
	}
	s.mustServe(t, "after a create of its ID")
}

// TestSessionExecOptions: an exec's environment is its own, --cwd is
// taken and --timeout ends the command (124) but not the session.
func TestSessionExecOptions(t *testing.T) {
	s := newSession(t, sessOpts{})
	if r := s.exec(t, []string{"--env", "FOO=bar", "--env", "BAZ=qux"}, "sh", "-c", "echo $FOO $BAZ"); r.code != 0 || r.stdout != "bar qux\n" {
		t.Errorf("exec --env FOO=bar: want bar qux, got:\n%s", r)
	}
	if r := s.exec(t, nil, "sh", "-c", "echo ${FOO:-unset} ${BAZ:-unset}"); r.code != 0 || r.stdout != "unset unset\n" {
		t.Errorf("the environment of one exec was seen by the next:\n%s", r)
	}
	// Nor does an export inside one exec reach the next.
	mustExit(t, s.exec(t, nil, "sh", "-c", "export FOO=leak; cd /tmp"), 0, "export in an exec")
	if r := s.exec(t, nil, "sh", "-c", "echo ${FOO:-unset}; pwd"); r.code != 0 || r.stdout != "unset\n/workspace\n" {
		t.Errorf("an exec's export or cd reached the next:\n%s", r)
	}
	// The caller's environment does not reach a command.
	if r := s.exec(t, nil, "sh", "-c", "echo ${AGENTRUN_IT_SECRET:-absent}"); r.stdout != "absent\n" {
		t.Errorf("environment: %s", r)
	}
	if r := s.exec(t, []string{"--cwd", "/tmp"}, "pwd"); r.code != 0 || r.stdout != "/tmp\n" {
		t.Errorf("exec --cwd /tmp: want /tmp, got:\n%s", r)
	}
	if r := s.exec(t, nil, "pwd"); r.code != 0 || r.stdout != "/workspace\n" {
		t.Errorf("exec without --cwd: want /workspace, got:\n%s", r)
	}
	if r := s.exec(t, []string{"--cwd", "/no/such/dir"}, "pwd"); r.code == 0 {
		t.Errorf("exec --cwd of a missing directory succeeded:\n%s", r)
	}
	s.mustServe(t, "after a missing --cwd")

	m := sleepMarker()
	r := s.exec(t, []string{"--timeout", "300ms"}, "sh", "-c", "sleep "+m+" & sleep "+m)
	mustExit(t, r, 124, "exec --timeout 300ms")
	if r.dur > 5*time.Second {
		t.Errorf("exec --timeout 300ms returned after %v", r.dur)
	}
	if !strings.Contains(r.stderr, "timed out") {
		t.Errorf("exec --timeout: no word of the timeout on stderr:\n%s", r)
	}
	mustNotRun(t, m, 5*time.Second, "the process group of a timed-out exec")
	s.mustServe(t, "after a timeout")
	if r := s.exec(t, []string{"--timeout", "10s"}, "sh", "-c", "exit 5"); r.code != 5 {
		t.Errorf("exec --timeout 10s of a quick command: exit %d, want 5\n%s", r.code, r)
	}
}

// TestSessionExitStatus: exec exits as its command did, and a signal sent
// to the exec CLI reaches the command.
func TestSessionExitStatus(t *testing.T) { execModes(t, testSessionExitStatus) }

func testSessionExitStatus(t *testing.T, env []string) {
	ws := tempDir(t)
	writeFile(t, filepath.Join(ws, "notexec"), "#!/bin/sh\necho ran\n", 0o644)
	s := newSession(t, sessOpts{ws: ws, env: env})
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"false"}, 1},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "exit 255"}, 255},
		{[]string{token("no-such-command-")}, 127},
		{[]string{"/workspace/notexec"}, 126},
		{[]string{"sh", "-c", "kill -9 $$"}, 128 + 9},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
	} {
		r := s.exec(t, nil, c.args...)
		mustExit(t, r, c.want, fmt.Sprintf("exec %q", c.args))
	}

	// SIGTERM to the CLI reaches the command (and its group).
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		m := sleepMarker()
		out := new(syncBuf)
		name := map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT"}[sig]
		run := s.startExec(t, cliCfg{stdout: out}, nil, "sh", "-c", `trap "echo got `+name+`; exit 3" `+name+`; echo ready; sleep `+m+` </dev/null >/dev/null 2>&1 & wait`)
		if !until(10*time.Second, func() bool { return strings.Contains(out.String(), "ready") }) {
			_ = run.cmd.Process.Kill()
			t.Fatalf("the command did not start: %s\n%s", out, run.wait())
		}
		mustRun(t, m, "the command's sleep")
		if err := run.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		r := run.wait()
		mustExit(t, r, 3, "exec sent SIG"+name)
		if got := out.String(); got != "ready\ngot "+name+"\n" {
			t.Errorf("SIG%s to the exec CLI: stdout %q, want the command's trap to run", name, got)
		}
		if sig == syscall.SIGTERM {
			// (A non-interactive shell's background job ignores SIGINT.)
			mustNotRun(t, m, 5*time.Second, "the command's background sleep after SIG"+name+" to its group")
		}
	}
	s.mustServe(t, "after the signals")
}

// TestSessionHolderKilled: SIGKILL to a session's holder ends the
// session: the next list does not show it, and its init, socket, record
// and cgroup go.
func TestSessionHolderKilled(t *testing.T) {
	s := newSession(t, sessOpts{})
	m := sleepMarker()
	mustExit(t, s.exec(t, []string{"-d"}, "sleep", m), 0, "exec -d sleep")
	mustRun(t, m, "the detached sleep")
	rec := s.record(t)
	if err := syscall.Kill(rec.Owner.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the holder %d: %v", rec.Owner.PID, err)
	}
	until(5*time.Second, func() bool { return !procAlive(rec.Owner) })
	if status, ok := listed(t, nil)[s.id]; ok && status == "running" {
		t.Errorf("list shows %s running after its holder was killed", s.id)
	}
	if r := cli(t, "list"); strings.Contains(r.stdout, s.id) {
		t.Errorf("list still shows %s after its holder was killed:\n%s", s.id, r)
	}
	if exists(s.recordPath()) || exists(s.socket) {
		t.Errorf("list returned with the record (%v) or the socket (%v) of the dead holder's session still there", exists(s.recordPath()), exists(s.socket))
	}
	// The record, the socket and the init go at once; the cgroup may wait
	// until the dead holder has been reaped (by the host's PID 1, here
	// seconds later) and the next list sweeps it.
	var left []string
	until(5*time.Second, func() bool {
		if left = s.leftovers(rec); len(left) > 0 {
			time.Sleep(200 * time.Millisecond)
			cli(t, "list")
		}
		return len(left) == 0
	})
	if len(left) > 0 {
		t.Errorf("the holder was killed and list run for 5 s: left behind: %s", strings.Join(left, "; "))
	}
	mustNotRun(t, m, 5*time.Second, "the session's sleep after its holder was killed")
	r := s.exec(t, nil, "true")
	mustExit(t, r, 125, "exec after the holder was killed")
	oneLine(t, r, s.id, "exec after the holder was killed")
	// The ID is free again.
	newSession(t, sessOpts{id: s.id}).mustServe(t, "a new session of the ID")
}

// adoptedHolders lists this process's children that are agentrun
// processes (holders and inits it adopted as a child subreaper).
func adoptedHolders() []int {
	var out []int
	for _, k := range childrenOf(os.Getpid()) {
		if comm, _, _, ok := procStat(strconv.Itoa(k)); ok && strings.HasPrefix(comm, "agentrun") {
			out = append(out, k)
		}
	}
	return out
}

// reapAdopted waits up to guard for the adopted agentrun processes to
// end, reaps them and returns those still running.
func reapAdopted(guard time.Duration) []string {
	var live []string
	until(guard, func() bool {
		live = nil
		for _, k := range adoptedHolders() {
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(k, &ws, syscall.WNOHANG, nil); pid == k {
				continue
			}
			comm, state, _, _ := procStat(strconv.Itoa(k))
			live = append(live, fmt.Sprintf("%d %s (%s)", k, comm, state))
		}
		return len(live) == 0
	})
	return live
}

// TestSessionCreateKilled: SIGKILL to the CLI during create, at several
// points, leaves no holder, init, record or socket: a holder that cannot
// tell its creator that the session runs deletes it. The test process is
// a child subreaper, so that it adopts the holders of the killed CLIs.
// A session made before stays untouched.
func TestSessionCreateKilled(t *testing.T) {
	ws := tempDir(t)
	other := newSession(t, sessOpts{ws: ws})
	dir := other.dir
	becomeSubreaper(t)
	if left := reapAdopted(0); len(left) > 0 {
		t.Fatalf("agentrun processes are children of the test before it starts: %v", left)
	}
	hits, told := 0, 0
	delays := []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond,
		5 * time.Millisecond, 7 * time.Millisecond, 10 * time.Millisecond, 14 * time.Millisecond, 20 * time.Millisecond}
	for round := range 2 {
		for _, delay := range delays {
			what := fmt.Sprintf("round %d, killed after %v", round, delay)
			s := &testSession{id: token("it-sess-"), dir: dir}
			s.socket = filepath.Join(dir, "s", socketName(s.id))
			t.Cleanup(func() { s.forceDelete(t) })
			run := startCLI(t, cliCfg{}, "create", "--json", "--workspace", ws, s.id)
			time.Sleep(delay)
			_ = run.cmd.Process.Signal(syscall.SIGKILL)
			r := run.wait()
			if r.code == 0 {
				// Done before the kill: not a round of this test.
				mustExit(t, cli(t, "delete", s.id), 0, what+": delete of a session made before the kill")
				if left := reapAdopted(5 * time.Second); len(left) > 0 {
					t.Errorf("%s: after delete, agentrun processes left: %v", what, left)
				}
				continue
			}
			mustExit(t, r, 128+int(syscall.SIGKILL), what)
			adopted := adoptedHolders()
			if len(adopted) > 0 {
				hits++
			}
			// A holder that failed to write its ready line ends at once;
			// one that still runs a second later wrote it.
			left := reapAdopted(time.Second)
			if st := cli(t, "state", s.id); len(left) > 0 && st.code == 0 && strings.Contains(st.stdout, `"running"`) {
				// The holder wrote its ready line before the CLI died
				// (read by it or not: a pipe cannot tell): the CLI
				// was told, if not in time to say so.
				told++
				t.Logf("%s: the holder's ready line was written before the kill; the session runs", what)
				mustExit(t, cli(t, "delete", s.id), 0, what+": delete")
				if left = reapAdopted(5 * time.Second); len(left) == 0 {
					continue
				}
			}
			if len(left) > 0 {
				left = reapAdopted(4 * time.Second)
			}
			if len(left) > 0 {
				t.Errorf("%s: the holder or init outlived its killed creator by 5 s: %v", what, left)
				for _, l := range left {
					if pid, err := strconv.Atoi(strings.Fields(l)[0]); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				reapAdopted(5 * time.Second)
			}
			if st := cli(t, "state", s.id); st.code == 0 {
				t.Errorf("%s: the session exists: %s", what, st)
				s.forceDelete(t)
			}
			if _, ok := listed(t, nil)[s.id]; ok {
				t.Errorf("%s: list shows the session", what)
			}
			if exists(s.recordPath()) {
				t.Errorf("%s: the record %s is left", what, s.recordPath())
			}
			if exists(s.socket) {
				t.Errorf("%s: the socket %s is left", what, s.socket)
			}
			for _, pid := range adopted {
				if tmp, _ := filepath.Glob(filepath.Join(dir, "s", fmt.Sprintf(".%d.*.tmp", pid))); len(tmp) > 0 {
					t.Errorf("%s: the holder's temporary socket is left: %v", what, tmp)
				}
			}
		}
	}
	t.Logf("%d of %d rounds killed the CLI while its holder ran (%d after its ready line)", hits, 2*len(delays), told)

	// The commit rule, step by step: the holder is stopped while it builds
	// the session (its record exists, its socket is not yet published, so
	// its ready line is not written), its creator is killed, and the
	// holder goes on: it cannot say ready, so it deletes the session.
	stepped := 0
	for round := 0; round < 8 && stepped < 3; round++ {
		what := fmt.Sprintf("stepped round %d", round)
		s := &testSession{id: token("it-sess-"), dir: dir}
		s.socket = filepath.Join(dir, "s", socketName(s.id))
		t.Cleanup(func() { s.forceDelete(t) })
		run := startCLI(t, cliCfg{}, "create", "--json", "--workspace", ws, s.id)
		// The CLI's one child is its holder.
		holder := 0
		for deadline := time.Now().Add(5 * time.Second); holder == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
			for _, k := range childrenOf(run.pid()) {
				_ = syscall.Kill(k, syscall.SIGSTOP)
				holder = k
			}
			select {
			case <-run.done:
				deadline = time.Now()
			default:
			}
		}
		if holder == 0 {
			t.Errorf("%s: no holder seen as the CLI's child:\n%s", what, run.wait())
			continue
		}
		// Step the holder until its record exists.
		building := false
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if building = exists(s.recordPath()); building {
				break
			}
			_ = syscall.Kill(holder, syscall.SIGCONT)
			time.Sleep(300 * time.Microsecond)
			_ = syscall.Kill(holder, syscall.SIGSTOP)
		}
		published := exists(s.socket)
		_ = run.cmd.Process.Signal(syscall.SIGKILL)
		r := run.wait()
		_ = syscall.Kill(holder, syscall.SIGCONT)
		left := reapAdopted(5 * time.Second)
		if !building || published || r.code == 0 {
			// Past the point this round is about: clean up, no verdict.
			(&testSession{id: s.id}).forceDelete(t)
			reapAdopted(5 * time.Second)
			continue
		}
		stepped++
		if len(left) > 0 || exists(s.recordPath()) || exists(s.socket) {
			t.Errorf("%s: the holder, stopped while it built the session, went on after its creator died: left %v, record %v, socket %v",
				what, left, exists(s.recordPath()), exists(s.socket))
			(&testSession{id: s.id}).forceDelete(t)
			reapAdopted(5 * time.Second)
		}
	}
	if stepped == 0 {
		t.Errorf("no stepped round stopped a holder between its record and its socket")
	}
	t.Logf("%d stepped round(s) killed the creator of a holder stopped while it built the session", stepped)
	other.mustServe(t, "the session made before the killed creates")
}

// TestSessionExecClientKilled: SIGKILL to an exec CLI ends its command
// (the session sees the connection close), and the session serves on.
func TestSessionExecClientKilled(t *testing.T) { execModes(t, testSessionExecClientKilled) }

func testSessionExecClientKilled(t *testing.T, env []string) {
	s := newSession(t, sessOpts{env: env})
	m := sleepMarker()
	run := s.startExec(t, cliCfg{}, nil, "sh", "-c", "sleep "+m+" & sleep "+m)
	mustRun(t, m, "the exec's sleep")
	if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", run.pid())); err == nil {
		fast := !slices.Contains(s.env, "AGENTRUN_EXEC_FAST=0")
		t.Logf("the exec CLI runs %d thread(s) (1: the C fast path; more: Go)", len(tasks))
		if fast != (len(tasks) == 1) {
			t.Errorf("the exec CLI runs %d thread(s): the C fast path taken: %v, want %v (see execModes)", len(tasks), len(tasks) == 1, fast)
		}
	}
	if err := run.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mustExit(t, run.wait(), 128+int(syscall.SIGKILL), "the killed exec CLI")
	mustNotRun(t, m, 5*time.Second, "the command of a killed exec CLI")
	s.mustServe(t, "after an exec CLI was killed")
	if st := s.state(t); len(st.Processes) != 0 {
		t.Errorf("state still lists processes: %+v", st.Processes)
	}
	// A detached exec's process is not tied to its CLI.
	d := sleepMarker()
	mustExit(t, s.exec(t, []string{"-d"}, "sleep", d), 0, "exec -d")
	mustRun(t, d, "the detached sleep")
	time.Sleep(200 * time.Millisecond)
	if len(commandsWith(d)) == 0 {
		t.Error("a detached process ended with its exec CLI")
	}
}

// TestSessionOtherUser: a user cannot see, run in, signal, delete or
// connect to another user's session, in both directions.
func TestSessionOtherUser(t *testing.T) {
	if !isRoot() {
		t.Skip("needs root: starts the CLI as another user")
	}
	u := testUser(t)
	if u == nil {
		t.Skip("no test user (AGENTRUN_TEST_USER)")
	}
	as := credential(t, u)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	// Root's session, seen from the user.
	rs := newSession(t, sessOpts{})
	if _, ok := listed(t, as)[rs.id]; ok {
		t.Errorf("%s's list shows root's session %s", u.Username, rs.id)
	}
	if r := cliAs(t, as, "list"); strings.Contains(r.stdout, rs.id) {
		t.Errorf("%s's list shows root's session:\n%s", u.Username, r)
	}
	r := cliAs(t, as, "exec", rs.id, "--", "sh", "-c", "echo ran; touch /workspace/ran")
	mustExit(t, r, 125, u.Username+" exec in root's session")
	if strings.Contains(r.stdout, "ran") || exists(filepath.Join(rs.ws, "ran")) {
		t.Errorf("%s ran a command in root's session:\n%s", u.Username, r)
	}
	for _, args := range [][]string{{"state", rs.id}, {"kill", rs.id, "KILL"}, {"delete", rs.id}, {"delete", "-f", rs.id}} {
		if r := cliAs(t, as, args...); r.code == 0 {
			t.Errorf("%s: %q on root's session succeeded:\n%s", u.Username, args, r)
		}
	}
	// The socket itself, as the user and (positive control) as root.
	ra := runHost(t, as, attackerBin, "unix", rs.socket)
	if v, d := ra.verdict(); v != "BLOCKED" {
		t.Errorf("%s connecting to root's socket %s: %s %s\n%s", u.Username, rs.socket, v, d, ra)
	} else {
		t.Logf("%s connecting to root's socket: %s", u.Username, d)
	}
	if rr := runHost(t, nil, attackerBin, "unix", rs.socket); !strings.Contains(rr.stdout, "hello") {
		t.Errorf("positive control: root's own connection to its socket got no hello:\n%s", rr)
	}
	// Defense in depth: the socket made reachable to the user (a link in
	// an open directory, mode 0666); the server greets its own uid only.
	if link := linkSocket(t, rs.socket); link != "" {
		if rr := runHost(t, nil, attackerBin, "unix", filepath.Join(link, "a.sock")); !strings.Contains(rr.stdout, "hello") {
			t.Errorf("positive control: root's connection through the link got no hello:\n%s", rr)
		}
		if rr := runHost(t, as, attackerBin, "unix", filepath.Join(link, "a.sock")); strings.Contains(rr.stdout, "hello") || rr.code == 3 {
			t.Errorf("%s, connecting to root's session through a link, got its hello (or could not try):\n%s", u.Username, rr)
		} else {
			t.Logf("%s connecting to root's session through a link: %s", u.Username, strings.TrimSpace(rr.stdout))
		}
	}
	rs.mustServe(t, "after the other user's attempts")

	// The user's session, seen from root.
	ws := tempDir(t)
	if err := os.Chown(ws, uid, gid); err != nil {
		t.Fatal(err)
	}
	us := newSession(t, sessOpts{as: as, ws: ws})
	if _, ok := listed(t, nil)[us.id]; ok {
		t.Errorf("root's list shows %s's session %s", u.Username, us.id)
	}
	if got := listed(t, as)[us.id]; got != "running" {
		t.Errorf("%s's list: its session is %q, want running", u.Username, got)
	}
	r = cli(t, "exec", us.id, "--", "true")
	mustExit(t, r, 125, "root exec in the user's session")
	oneLine(t, r, us.id, "root exec in the user's session")
	for _, args := range [][]string{{"state", us.id}, {"kill", us.id, "KILL"}, {"delete", us.id}} {
		if r := cli(t, args...); r.code == 0 {
			t.Errorf("root: %q on %s's session succeeded:\n%s", args, u.Username, r)
		}
	}
	// Root may connect to any socket, but the session greets only its
	// own user.
	if rr := runHost(t, nil, attackerBin, "unix", us.socket); strings.Contains(rr.stdout, "hello") {
		t.Errorf("the user's session greeted root:\n%s", rr)
	}
	if rr := runHost(t, as, attackerBin, "unix", us.socket); !strings.Contains(rr.stdout, "hello") {
		t.Errorf("positive control: the user's own connection got no hello:\n%s", rr)
	}
	us.mustServe(t, "after root's attempts")
}

// runHost runs a host program (not agentrun) to completion as sys.
func runHost(t *testing.T, sys *syscall.SysProcAttr, bin string, args ...string) runResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + sandboxPath, "LANG=C"}
	cmd.Dir = "/"
	cmd.SysProcAttr = sys
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	return runResult{args: append([]string{bin}, args...), code: exitCode(cmd, err), stdout: out.String(), stderr: errb.String(), dur: time.Since(start)}
}

// TestSessionAttacks: a command inside a session sees only its session's
// processes, cannot end or trace the init, and finds no way to the
// holder's socket; each with a positive control.
func TestSessionAttacks(t *testing.T) {
	a := newSession(t, sessOpts{ws: newWorkspace(t)})
	b := newSession(t, sessOpts{})
	ma, mb := sleepMarker(), sleepMarker()
	mustExit(t, a.exec(t, []string{"-d"}, "sleep", ma), 0, "the marker in A")
	mustExit(t, b.exec(t, []string{"-d"}, "sleep", mb), 0, "the marker in B")
	mustRun(t, ma, "A's marker")
	mustRun(t, mb, "B's marker")
	hm := token("it-host-")
	hostProcess(t, hm)
	attacker := func(sub ...string) runResult {
		t.Helper()
		return a.exec(t, nil, append([]string{"/workspace/attacker"}, sub...)...)
	}

	// Processes: only A's own.
	r := a.exec(t, nil, "ps", "-eo", "pid=,args=")
	var others []string
	sawInit, sawMarker, markerPid := false, false, ""
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "1" && f[1] == "agentrun-init":
			sawInit = true
		case len(f) >= 3 && f[1] == "sleep" && f[2] == ma:
			sawMarker = true
			markerPid = f[0]
		case len(f) >= 2 && f[1] == "ps":
		default:
			others = append(others, line)
		}
	}
	if r.code != 0 || !sawInit || !sawMarker {
		t.Errorf("positive control: ps in A does not show its init as pid 1 and its own sleep:\n%s", r)
	}
	if len(others) > 0 {
		t.Errorf("ps in A shows processes that are not A's: %q\n%s", others, r)
	}
	mustSucceed(t, attacker("pidscan", ma), "A finds its own process")
	mustBlock(t, attacker("pidscan", mb), "A finds B's process")
	mustBlock(t, attacker("pidscan", hm), "A finds a host process")
	mustBlock(t, attacker("pidscan", "__session-holder"), "A finds a session holder")

	// The init: no signal ends it, it cannot be traced or read.
	own, err := strconv.Atoi(markerPid)
	if err != nil {
		t.Fatalf("the pid of A's marker in ps: %q", markerPid)
	}
	mustSucceed(t, attacker("ptrace", strconv.Itoa(own)), "A traces its own process")
	mustBlock(t, attacker("ptrace", "1"), "A traces its init")
	mustBlock(t, attacker("vmread", "1"), "A reads its init's memory")
	mustSucceed(t, attacker("ls", fmt.Sprintf("/proc/%d/fd", own)), "A lists its own process's fds")
	mustBlock(t, attacker("ls", "/proc/1/fd"), "A lists its init's fds (its channel to the holder)")
	mustBlock(t, attacker("fd-reopen", "/proc/1/fd"), "A reopens its init's fds")
	for _, sig := range []string{"KILL", "TERM", "INT", "HUP", "QUIT", "USR1", "SEGV", "ABRT", "STOP"} {
		mustExit(t, a.exec(t, nil, "sh", "-c", "kill -"+sig+" 1; sleep 0.05"), 0, "kill -"+sig+" 1 in A")
	}
	// kill(2) says yes and the kernel drops the signal: only the
	// session's survival tells.
	t.Logf("kill(1, SIGKILL) in A: %s", strings.TrimSpace(attacker("kill", "1", "9").stdout))
	if _, state, _, ok := procStat(strconv.Itoa(a.pid)); !ok || state == "T" || state == "Z" {
		t.Errorf("A's init %d after the signals: state %q (alive %v)", a.pid, state, ok)
	}
	a.mustServe(t, "after signals to its init from inside")
	mustSucceed(t, attacker("kill", strconv.Itoa(own), "9"), "A kills its own process")
	mustNotRun(t, ma, 5*time.Second, "A's own process after A killed it")

	// The socket: not in A's file system, nor in its network namespace.
	mustSucceed(t, attacker("stat", "/workspace/attacker"), "A stats its workspace")
	mustBlock(t, attacker("stat", a.socket), "A finds its socket by path")
	mustBlock(t, attacker("ls", filepath.Dir(a.socket)), "A lists the socket directory")
	mustBlock(t, attacker("ls", a.dir), "A lists the state directory")
	mustBlock(t, attacker("unix", a.socket), "A connects to its socket by path")
	mustBlock(t, attacker("unix", b.socket), "A connects to B's socket by path")
	nu := a.exec(t, nil, "cat", "/proc/net/unix")
	if nu.code != 0 || !strings.HasPrefix(nu.stdout, "Num") {
		t.Errorf("positive control: A cannot read /proc/net/unix:\n%s", nu)
	}
	for _, sock := range []string{a.socket, b.socket} {
		if strings.Contains(nu.stdout, filepath.Base(sock)) || strings.Contains(nu.stdout, filepath.Dir(sock)) {
			t.Errorf("A's /proc/net/unix lists %s:\n%s", sock, nu.stdout)
		}
	}
	if hasTool("python3") {
		// Positive control: a socket of A's own is listed there.
		own := "/tmp/" + token("it-sock-")
		script := `import socket
s = socket.socket(socket.AF_UNIX)
s.bind("` + own + `")
s.listen(1)
print(open("/proc/net/unix").read())`
		if r := a.exec(t, nil, "python3", "-c", script); r.code != 0 || !strings.Contains(r.stdout, own) {
			t.Errorf("positive control: A's own socket is not in its /proc/net/unix:\n%s", r)
		}
	}
	// A policy that would bind the state directory into a session is
	// refused.
	id := token("it-sess-")
	r = cli(t, "create", "--workspace", tempDir(t), "--ro", filepath.Dir(a.socket)+":/sock", id)
	if r.code == 0 {
		(&testSession{id: id}).forceDelete(t)
		t.Errorf("a session with the socket directory bound in was made:\n%s", r)
	}

	// Defense in depth: the socket hard-linked where a session can reach
	// it. The server greets only processes in the holder's PID namespace
	// (and of its uid), so a command in a session gets no hello.
	link := linkSocket(t, a.socket)
	if link != "" {
		c, err := net.Dial("unix", filepath.Join(link, "a.sock"))
		if err != nil {
			t.Fatalf("positive control: connect through the link: %v", err)
		}
		buf := make([]byte, 256)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := c.Read(buf)
		c.Close()
		if !strings.Contains(string(buf[:n]), `"hello"`) {
			t.Errorf("positive control: no hello through the link: %q", buf[:n])
		}
		// As root the bind is an idmapped mount, which /run's
		// filesystem may not offer (tmpfs before Linux 6.3): create then
		// refuses it, fail closed, and there is nothing to attack.
		ws2, id2 := newWorkspace(t), token("it-sess-")
		bindable := true
		if isRoot() {
			probe := cli(t, "create", "--workspace", ws2, "--ro", link+":/sock", id2)
			(&testSession{id: id2}).forceDelete(t)
			if probe.code != 0 && strings.Contains(probe.stderr, "idmapped mount") {
				t.Logf("no bind of %s here (%s): the linked-socket attack does not apply", link, strings.TrimSpace(probe.stderr))
				bindable = false
			}
		}
		if bindable {
			c2 := newSession(t, sessOpts{ws: ws2, flags: []string{"--ro", link + ":/sock"}})
			r := c2.exec(t, nil, "/workspace/attacker", "unix", "/sock/a.sock")
			if strings.Contains(r.stdout, "hello") {
				t.Errorf("a command in a session got the hello of another session's socket:\n%s", r)
			} else {
				t.Logf("a command in a session connecting to a linked session socket: %s", strings.TrimSpace(r.stdout))
			}
			if v, _ := r.verdict(); v == "" {
				t.Errorf("the connection attempt did not run:\n%s", r)
			}
		}
		a.mustServe(t, "after the linked socket was tried")
	}
	b.mustServe(t, "after the attacks on A")
	mustRun(t, mb, "B's marker after the attacks on A")
}

// linkSocket hard-links sock into a fresh directory beside the state
// directory's root (the same file system) that a sandbox may bind, and
// returns the directory, or "" where no link can be made. As root the
// socket is made reachable by the sandbox's ids (mode 0666), so that the
// server's own check, not the file's mode, is what is tested.
func linkSocket(t *testing.T, sock string) string {
	t.Helper()
	root := filepath.Dir(filepath.Dir(filepath.Dir(sock))) // .../agentrun
	d, err := os.MkdirTemp(filepath.Dir(root), "agentrun-it-link-")
	if err != nil {
		t.Logf("no directory beside %s for a link: %v", root, err)
		return ""
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(sock, filepath.Join(d, "a.sock")); err != nil {
		t.Logf("cannot link the socket beside the state directory: %v", err)
		return ""
	}
	if isRoot() {
		if err := os.Chmod(filepath.Join(d, "a.sock"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// socketName is the file name of session id's socket
// (session.SocketPath): a hash of the id, as an id may be longer than a
// socket path can be.
func socketName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:12]) + ".sock"
}

// TestSessionExecTTY: exec -t runs the command on a terminal of the
// sandbox's own, at the caller's terminal's size, in the foreground of its
// session (Ctrl-C through such a terminal: TestSessionTTY of the Go API,
// over the same socket). Without a terminal on stdin, -t is refused in
// one line.
func TestSessionExecTTY(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skipf("needs util-linux's script for a terminal: %v", err)
	}
	s := newSession(t, sessOpts{})
	inTerminal := func(line string) runResult {
		t.Helper()
		cmd := exec.Command(script, "-qec", line, "/dev/null")
		cmd.Env = append(os.Environ(), s.env...)
		cmd.SysProcAttr = s.as
		// script's stdin stays open and silent: at its end script would
		// type a NUL into the terminal, which echoes it as "^@".
		in, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		defer w.Close()
		cmd.Stdin = in
		var out, errb syncBuf
		cmd.Stdout, cmd.Stderr = &out, &errb
		err = cmd.Run()
		return runResult{code: exitCode(cmd, err), stdout: strings.ReplaceAll(out.String(), "\r\n", "\n"), stderr: errb.String()}
	}
	r := inTerminal("stty rows 33 cols 77; " + agentrunBin + " exec -t " + s.id + " -- sh -c 'tty; stty size; ps -o stat= -p $$'")
	f := strings.Fields(r.stdout)
	if r.code != 0 || len(f) < 4 || !strings.HasPrefix(f[0], "/dev/pts/") || f[1] != "33" || f[2] != "77" || !strings.Contains(f[3], "+") {
		t.Errorf("exec -t: want a /dev/pts terminal of 33x77 in the foreground, got %q:\n%s", r.stdout, r)
	}
	// Positive control: without -t, no terminal.
	if r := s.exec(t, nil, "tty"); r.code == 0 {
		t.Errorf("exec without -t has a terminal:\n%s", r)
	}
	r = s.exec(t, []string{"-t"}, "tty")
	if r.code != 125 || !strings.Contains(r.stderr, "not a terminal") {
		t.Errorf("exec -t without a terminal: want 125 and one line, got:\n%s", r)
	}
	r = s.exec(t, []string{"-t", "-d"}, "true")
	mustExit(t, r, 2, "exec -t -d")
	s.mustServe(t, "after exec -t")
}

// TestSessionCreateKeepsNoCallerFDs: the holder keeps none of the
// descriptors its creator inherited (a pipe of the caller's shell), so a
// reader of that pipe sees its end when create returns, not when the
// session ends.
func TestSessionCreateKeepsNoCallerFDs(t *testing.T) {
	ws := tempDir(t)
	id := token("it-sess-")
	t.Cleanup(func() { _ = exec.Command(agentrunBin, "delete", "-f", id).Run() })
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	cmd := exec.Command(agentrunBin, "create", "--workspace", ws, "--json", id)
	cmd.Env = []string{"PATH=" + sandboxPath, "LANG=C"} // as cli's, so that both find one state directory
	// Fds 3 and 4 of create: its ready socket takes the holder's fd 3,
	// and nothing should give it fd 4.
	cmd.ExtraFiles = []*os.File{wr, wr}
	out, err := cmd.Output()
	wr.Close()
	if err != nil {
		t.Fatalf("create: %v %s", err, out)
	}
	got := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(rd)
		got <- err
	}()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder keeps the creator's inherited pipe open")
	}
	// Positive control: the session runs.
	if r := cli(t, "exec", id, "--", "true"); r.code != 0 {
		t.Errorf("exec in the session: %s", r)
	}
}
