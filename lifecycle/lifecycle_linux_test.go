//go:build linux

package lifecycle_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/internal/procid"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary a helper process: "signal DIR ID" finds
// a sandbox by its record and sends it SIGUSR1; "own DIR ID WS" creates a
// sandbox, says "ready PID" and blocks until it is killed.
const helperEnv = "AGENTRUN_LIFECYCLE_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(strings.Fields(h)))
	}
	// Holders of transient systemd scopes re-execute the binary.
	nsinit.Dispatch()
	os.Exit(m.Run())
}

func helper(args []string) int {
	switch {
	case len(args) == 3 && args[0] == "signal":
		recs, err := lifecycle.List(args[1])
		if err != nil {
			fmt.Println("list:", err)
			return 1
		}
		for _, r := range recs {
			fmt.Printf("listed %s %s\n", r.ID, r.State)
		}
		r, err := lifecycle.Load(args[1], args[2])
		if err != nil {
			fmt.Println("load:", err)
			return 1
		}
		if err := r.Signal(syscall.SIGUSR1); err != nil {
			fmt.Println("signal:", err)
			return 1
		}
		fmt.Println("signalled")
		return 0
	case len(args) == 4 && args[0] == "own":
		spec, err := compile(args[3], "sleep 1000")
		if err != nil {
			fmt.Println("compile:", err)
			return 1
		}
		sb, err := lifecycle.Create(context.Background(), spec, lifecycle.Options{ID: args[2], StateDir: args[1], SeccompCache: &seccomp.Cache{}})
		if err != nil {
			fmt.Println("create:", err)
			return 1
		}
		if err := sb.Start(); err != nil {
			fmt.Println("start:", err)
			return 1
		}
		fmt.Println("ready", sb.Pid())
		select {}
	}
	fmt.Println("unknown helper", args)
	return 2
}

func compile(ws, script string) (*specs.Spec, error) {
	p := &agentrun.Policy{Workspace: ws, Command: []string{"/bin/sh", "-c", script}}
	h, err := agentrun.NewHostInfo(p)
	if err != nil {
		return nil, err
	}
	return agentrun.Compile(p, h)
}

// env is one test's workspace, state directory and filter cache.
type env struct {
	ws, dir string
	cache   *seccomp.Cache
}

func newEnv(t *testing.T) *env {
	return &env{ws: t.TempDir(), dir: filepath.Join(t.TempDir(), "sandboxes"), cache: &seccomp.Cache{}}
}

// create makes a sandbox running script, or skips where this host or user
// can build none at all.
func (e *env) create(t *testing.T, id, script string) *lifecycle.Sandbox {
	t.Helper()
	spec, err := compile(e.ws, script)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := lifecycle.Create(context.Background(), spec, lifecycle.Options{ID: id, StateDir: e.dir, SeccompCache: e.cache})
	var se *lifecycle.StepError
	if errors.As(err, &se) && (se.Step == "user namespace" || se.Step == "clone") {
		t.Skipf("no sandbox here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Delete() })
	return sb
}

func (e *env) load(t *testing.T, id string) *lifecycle.Record {
	t.Helper()
	r, err := lifecycle.Load(e.dir, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// noCgroupLeft fails the test for each of r's cgroup directories that is
// still there; prefix says which round.
func noCgroupLeft(t *testing.T, r *lifecycle.Record, prefix string) {
	t.Helper()
	for _, p := range r.Cgroup {
		if exists(p) {
			t.Errorf("%sthe cgroup %s is left", prefix, p)
		}
	}
}

// TestCreateStartWaitDelete walks a named sandbox through its life: the
// command does not run before Start, the record follows each state, Wait
// gives the command's status and Delete leaves nothing behind.
func TestCreateStartWaitDelete(t *testing.T) {
	e := newEnv(t)
	sb := e.create(t, "walk", "echo ran > /workspace/ran; exit 7")
	if sb.State() != lifecycle.Created {
		t.Fatalf("state after Create: %s", sb.State())
	}
	r := e.load(t, "walk")
	if r.State != lifecycle.Created || r.Init == nil || r.Init.PID != sb.Pid() || r.ID != "walk" {
		t.Fatalf("record after Create: %+v (init pid %d)", r, sb.Pid())
	}
	// The init waits for its release, whatever the time: not a timing
	// assertion, the command cannot run before Start.
	time.Sleep(100 * time.Millisecond)
	if exists(filepath.Join(e.ws, "ran")) {
		t.Fatal("the command ran before Start")
	}
	if err := sb.Start(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(); err == nil {
		t.Error("a second Start succeeded")
	}
	exit, err := sb.Wait()
	if err != nil || exit.Code != 7 {
		t.Fatalf("Wait: %+v %v, want exit 7", exit, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "ran")); err != nil || string(b) != "ran\n" {
		t.Fatalf("positive control: the workspace write %q %v", b, err)
	}
	if got := e.load(t, "walk").State; got != lifecycle.Stopped || sb.State() != lifecycle.Stopped {
		t.Errorf("state after Wait: record %s, sandbox %s", got, sb.State())
	}
	if err := sb.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Delete(); err != nil {
		t.Errorf("a second Delete: %v", err)
	}
	if _, err := lifecycle.Load(e.dir, "walk"); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Errorf("Load after Delete: %v, want ErrNotFound", err)
	}
	noCgroupLeft(t, r, "")
}

// TestDeleteCreated deletes a sandbox that was never started: its command
// never runs, and its init, cgroup and record are gone.
func TestDeleteCreated(t *testing.T) {
	e := newEnv(t)
	sb := e.create(t, "never", "echo ran > /workspace/ran")
	r := e.load(t, "never")
	if err := sb.Delete(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(e.ws, "ran")) {
		t.Error("the command of a sandbox deleted before Start ran")
	}
	if r.Init.Alive() {
		t.Errorf("the init %d outlived Delete", r.Init.PID)
	}
	noCgroupLeft(t, r, "")
	if exists(filepath.Join(e.dir, "never.json")) {
		t.Error("the record is left")
	}
	if err := sb.Start(); err == nil {
		t.Error("Start of a deleted sandbox succeeded")
	}
}

// TestIDs refuses an ID in use and IDs that are not plain names, with
// nothing written for them; the sandbox that holds the ID is unharmed.
func TestIDs(t *testing.T) {
	e := newEnv(t)
	sb := e.create(t, "dup", "exit 3")
	spec, err := compile(e.ws, "exit 0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lifecycle.Create(context.Background(), spec, lifecycle.Options{ID: "dup", StateDir: e.dir, SeccompCache: e.cache}); !errors.Is(err, lifecycle.ErrExists) {
		t.Fatalf("a second Create of dup: %v, want ErrExists", err)
	}
	before, _ := os.ReadDir(e.dir)
	for _, id := range []string{"..", ".", "a/b", "../x", ".hidden", "a..b", "-x", "x y", "x\n", "é", strings.Repeat("a", 129)} {
		if _, err := lifecycle.Create(context.Background(), spec, lifecycle.Options{ID: id, StateDir: e.dir, SeccompCache: e.cache}); err == nil || !strings.Contains(err.Error(), "invalid sandbox id") {
			t.Errorf("Create with id %q: %v, want an invalid id error", id, err)
		}
		if _, err := lifecycle.Load(e.dir, id); err == nil {
			t.Errorf("Load with id %q succeeded", id)
		}
	}
	after, _ := os.ReadDir(e.dir)
	if len(after) != len(before) {
		t.Errorf("refused ids wrote to the state directory: %v", after)
	}
	if err := sb.Start(); err != nil {
		t.Fatal(err)
	}
	if exit, err := sb.Wait(); err != nil || exit.Code != 3 {
		t.Errorf("the sandbox holding the id: %+v %v, want exit 3", exit, err)
	}
}

// TestAnotherProcessSignals finds a running sandbox by its ID from
// another process, which lists it and signals it; the command's trap
// shows the signal arrived.
func TestAnotherProcessSignals(t *testing.T) {
	e := newEnv(t)
	sb := e.create(t, "target", "trap 'exit 5' USR1; echo > /workspace/ready; while :; do sleep 0.05; done")
	if err := sb.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !exists(filepath.Join(e.ws, "ready")); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("hang guard: the command never got ready")
		}
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), helperEnv+"=signal "+e.dir+" target")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "listed target running") || !strings.Contains(string(out), "signalled") {
		t.Fatalf("the helper: %v\n%s", err, out)
	}
	if exit, err := sb.Wait(); err != nil || exit.Code != 5 {
		t.Fatalf("Wait: %+v %v, want exit 5 from the trap", exit, err)
	}
}

// TestSweepAfterOwnerKilled kills the owner of a sandbox with SIGKILL: its
// init dies with it, and Sweep removes the record it left.
func TestSweepAfterOwnerKilled(t *testing.T) {
	e := newEnv(t)
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), helperEnv+"=own "+e.dir+" orphan "+e.ws)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "ready" {
		if strings.HasPrefix(line, "create:") && (strings.Contains(line, "user namespace") || strings.Contains(line, "clone")) {
			t.Skipf("no sandbox here: %s", line)
		}
		t.Fatalf("the owner said %q", line)
	}
	r := e.load(t, "orphan")
	if r.State != lifecycle.Running || r.Owner.PID != cmd.Process.Pid {
		t.Fatalf("record of the live owner: %+v", r)
	}
	if n, err := lifecycle.Sweep(e.dir); n != 0 || err != nil || !exists(filepath.Join(e.dir, "orphan.json")) {
		t.Fatalf("Sweep with the owner alive: removed %d, %v", n, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got := e.load(t, "orphan").State; got != lifecycle.Stopped {
		t.Errorf("a record whose owner died reads %s, want stopped", got)
	}
	if n, err := lifecycle.Sweep(e.dir); n != 1 || err != nil {
		t.Fatalf("Sweep after the owner died: removed %d, %v; want 1", n, err)
	}
	if exists(filepath.Join(e.dir, "orphan.json")) {
		t.Error("the record is left")
	}
	for deadline := time.Now().Add(10 * time.Second); r.Init.Alive(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the init %d outlived its owner", r.Init.PID)
		}
	}
}

// TestForgedRecords plants records by hand: one that names a live process
// under another start time (its pid reused), one whose owner is dead and
// whose init pid now belongs to another process, and malformed ones. The
// process is signalled by neither Signal nor Sweep, and the malformed
// records are reported, not trusted.
func TestForgedRecords(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	vid, err := procid.Of(victim.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	self, err := procid.Self()
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	reused := vid
	reused.Start++
	write := func(name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("reused.json", lifecycle.Record{Version: 1, ID: "reused", State: lifecycle.Running, Owner: self, Init: &reused})
	write("orphan.json", lifecycle.Record{Version: 1, ID: "orphan", State: lifecycle.Running,
		Owner: procid.ID{PID: dead.Process.Pid, Start: 1, PidNS: self.PidNS}, Init: &reused})
	write("renamed.json", lifecycle.Record{Version: 1, ID: "other", State: lifecycle.Running, Owner: self, Init: &vid})
	write("future.json", lifecycle.Record{Version: 3, ID: "future", State: lifecycle.Running, Owner: self, Init: &vid})
	if err := os.WriteFile(filepath.Join(e.dir, "garbage.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(e.dir, "reused.json"), filepath.Join(e.dir, "link.json")); err != nil {
		t.Fatal(err)
	}

	r := e.load(t, "reused")
	if r.State != lifecycle.Stopped {
		t.Errorf("a record whose init pid was reused reads %s, want stopped", r.State)
	}
	if err := r.Signal(syscall.SIGKILL); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal through a reused pid: %v, want os.ErrProcessDone", err)
	}
	for _, id := range []string{"renamed", "future", "garbage", "link"} {
		if _, err := lifecycle.Load(e.dir, id); err == nil {
			t.Errorf("Load of the %s record succeeded", id)
		}
	}
	recs, err := lifecycle.List(e.dir)
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"orphan", "reused"}) || err == nil {
		t.Errorf("List: %v, %v; want orphan and reused, and errors for the rest", ids, err)
	}
	n, err := lifecycle.Sweep(e.dir)
	if n != 1 || err == nil || exists(filepath.Join(e.dir, "orphan.json")) || !exists(filepath.Join(e.dir, "reused.json")) {
		t.Errorf("Sweep: removed %d, %v; want the orphan's record alone removed, errors for the malformed", n, err)
	}
	if !vid.Alive() || unix.Kill(victim.Process.Pid, 0) != nil {
		t.Fatal("SANDBOX ESCAPE: a forged record had an unrelated process killed")
	}
}

// TestRunLeavesNoRecord checks that a one-shot Run is anonymous: it
// writes no record, so nothing is left to sweep.
func TestRunLeavesNoRecord(t *testing.T) {
	x := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", x)
	t.Setenv("TMPDIR", x)
	ws := t.TempDir()
	res, err := agentrun.Run(context.Background(), &agentrun.Policy{Workspace: ws, Command: []string{"/bin/true"}}, agentrun.Options{SeccompCache: &seccomp.Cache{}})
	var se *agentrun.SetupError
	if errors.As(err, &se) && (se.Step == "user namespace" || se.Step == "clone") {
		t.Skipf("no sandbox here: %v", err)
	}
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %+v %v", res, err)
	}
	// Other programs of this user may hold named sandboxes: only this
	// process's records count.
	dir := lifecycle.StateDir(os.Geteuid())
	recs, _ := lifecycle.List(dir)
	for _, r := range recs {
		if r.Owner.PID == os.Getpid() {
			t.Errorf("a one-shot Run left a record in %s: %+v", dir, r)
		}
	}
}

// TestWaitBeforeStart calls Wait before Start, as a caller that watches
// the sandbox from a goroutine would: Wait must not take the reports Start
// reads (the violation listener, "started"), so the command runs, its
// denied call is reported, and Start returns while it still runs.
func TestWaitBeforeStart(t *testing.T) {
	e := newEnv(t)
	spec, err := compile(e.ws, "touch f && chmod 4755 f; echo $? > /workspace/rc; read x; exit 4")
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan seccomp.Event, 8)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	sb, err := lifecycle.Create(context.Background(), spec, lifecycle.Options{StateDir: e.dir, SeccompCache: e.cache, Stdin: pr,
		OnViolation: func(ev seccomp.Event) { events <- ev }})
	pr.Close()
	var se *lifecycle.StepError
	if errors.As(err, &se) && (se.Step == "user namespace" || se.Step == "clone") {
		t.Skipf("no sandbox here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Delete()
	type waited struct {
		exit nsinit.Exit
		err  error
	}
	done := make(chan waited, 1)
	go func() {
		exit, err := sb.Wait()
		done <- waited{exit, err}
	}()
	// Not a timing assertion: Wait has had its chance to read first.
	time.Sleep(50 * time.Millisecond)
	started := make(chan error, 1)
	go func() { started <- sb.Start() }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("hang guard: Start did not return while the command runs (Wait took its report)")
	}
	select {
	case ev := <-events:
		if ev.Name != "fchmodat" && ev.Name != "chmod" && ev.Name != "fchmodat2" {
			t.Errorf("violation %+v, want the setuid chmod", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("hang guard: the denied chmod was never reported (the listener went to Wait)")
	}
	pw.Close()
	w := <-done
	if w.err != nil || w.exit.Code != 4 {
		t.Fatalf("Wait: %+v %v, want exit 4", w.exit, w.err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.ws, "rc")); string(b) != "1\n" {
		t.Errorf("chmod 4755 exited %q, want 1 (denied)", b)
	}

	// A Wait on a sandbox that is killed before it starts returns.
	sb2 := e.create(t, "", "echo ran > /workspace/ran2")
	go func() {
		exit, err := sb2.Wait()
		done <- waited{exit, err}
	}()
	if err := sb2.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-done:
		if w.err != nil || w.exit.Signal != int(syscall.SIGKILL) {
			t.Errorf("Wait after Kill before Start: %+v %v", w.exit, w.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("hang guard: Wait did not return after Kill before Start")
	}
	if err := sb2.Start(); err == nil {
		t.Error("Start after Kill succeeded")
	}
	if exists(filepath.Join(e.ws, "ran2")) {
		t.Error("the command of a sandbox killed before Start ran")
	}
}

// TestFailedCreateLeavesNoRecord makes a named Create fail after its
// record exists (its context ends before the clone): the record goes, and
// the ID is free again.
func TestFailedCreateLeavesNoRecord(t *testing.T) {
	e := newEnv(t)
	spec, err := compile(e.ws, "exit 0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lifecycle.Create(ctx, spec, lifecycle.Options{ID: "again", StateDir: e.dir, SeccompCache: e.cache}); err == nil {
		t.Fatal("Create with an ended context succeeded")
	}
	if _, err := lifecycle.Load(e.dir, "again"); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Fatalf("Load after the failed Create: %v, want ErrNotFound", err)
	}
	sb := e.create(t, "again", "exit 6")
	if err := sb.Start(); err != nil {
		t.Fatal(err)
	}
	if exit, err := sb.Wait(); err != nil || exit.Code != 6 {
		t.Errorf("the second Create's sandbox: %+v %v", exit, err)
	}
}

// TestStartDeleteRace starts and deletes a sandbox at once, and deletes it
// twice at once: whatever the order, Delete removes everything once and
// nothing races (run with -race).
func TestStartDeleteRace(t *testing.T) {
	e := newEnv(t)
	for i := range 5 {
		sb := e.create(t, fmt.Sprintf("race%d", i), "sleep 5")
		r := e.load(t, sb.ID())
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); _ = sb.Start() }()
		go func() { defer wg.Done(); _ = sb.Delete() }()
		go func() { defer wg.Done(); _ = sb.Delete() }()
		wg.Wait()
		if r.Init.Alive() || exists(filepath.Join(e.dir, sb.ID()+".json")) {
			t.Fatalf("round %d: the init or the record outlived Delete", i)
		}
		noCgroupLeft(t, r, fmt.Sprintf("round %d: ", i))
	}
}
