//go:build linux

package cgroups

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/sdbus"
	"github.com/agentrun/agentrun/internal/sdbus/sdbustest"
)

// testHolder is the scope holder in tests: this binary as the "hold"
// helper.
func testHolder() *exec.Cmd { return helper("hold") }

// fakeScopes is a cgroup v2 tree plus a fake systemd user manager that
// "owns" a cgroup in it and makes scopes there as root, the way systemd
// would: the protocol and every error path of the scope code run against
// it. On the development hosts the controllers live in cgroup v1 and the
// v2 tree has none, so there only placement, kill and cleanup are real;
// in the VM's root mode the same test also enforces limits. The real
// user manager is covered by TestScopeRealUserManager (vmtest mode
// user-systemd).
type fakeScopes struct {
	m       *Manager // v2 driver, endpoints at the fake
	fake    *sdbustest.Manager
	manager string // the fake manager's cgroup directory
}

func newFakeScopes(t *testing.T, configure func(f *sdbustest.Manager)) *fakeScopes {
	t.Helper()
	base := testManager(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: the fake manager moves processes between cgroups")
	}
	if base.lay.v2 == nil || base.lay.v2.outside {
		t.Skipf("mode %s: no cgroup2 tree to make scopes in", base.Mode())
	}
	h := base.lay.v2
	rel := fmt.Sprintf("/agentrun-test-%d-usermgr", os.Getpid())
	dir := filepath.Join(h.mount, rel)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range subdirsDeepestFirst(dir) {
			if err := rmdirRetry(d, time.Now().Add(2*time.Second)); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	// What systemd does for a Delegate=yes user@.service: the manager's
	// children get every controller the tree offers.
	avail, _ := readList(filepath.Join(dir, "cgroup.controllers"))
	wanted := v2Wanted()
	for _, c := range avail {
		if slices.Contains(wanted[:], c) {
			_ = writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+c)
		}
	}
	rt := t.TempDir()
	f := &sdbustest.Manager{ControlGroup: rel}
	f.OnStart = func(c sdbustest.Call) (string, *sdbus.Error) {
		// systemd: create the scope's cgroup and move the PIDs in.
		sd := filepath.Join(dir, c.Unit)
		if err := os.Mkdir(sd, 0o755); err != nil {
			return "", &sdbus.Error{Name: "org.freedesktop.systemd1.UnitExists", Message: err.Error()}
		}
		for _, p := range c.Props["PIDs"].Value.([]any) {
			if err := writeFile(filepath.Join(sd, "cgroup.procs"), strconv.Itoa(int(p.(uint32)))); err != nil {
				return "failed", nil
			}
		}
		return "done", nil
	}
	f.OnStop = func(c sdbustest.Call) (string, *sdbus.Error) {
		// systemd: kill what is left (KillSignal=SIGKILL) and trim the
		// scope's cgroup, children included.
		sd := filepath.Join(dir, c.Unit)
		if !exists(sd) {
			return "", &sdbus.Error{Name: sdbus.ErrNoSuchUnit, Message: "Unit " + c.Unit + " not loaded."}
		}
		_ = writeFile(filepath.Join(sd, "cgroup.kill"), "1")
		for _, d := range subdirsDeepestFirst(sd) {
			if err := rmdirRetry(d, time.Now().Add(2*time.Second)); err != nil {
				return "failed", nil
			}
		}
		return "done", nil
	}
	f.OnAttach = func(c sdbustest.Call) *sdbus.Error {
		// The system manager, asked by the user manager.
		for _, p := range c.PIDs {
			if err := writeFile(filepath.Join(dir, c.Unit, c.Sub, "cgroup.procs"), strconv.Itoa(int(p))); err != nil {
				return &sdbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied", Message: err.Error()}
			}
		}
		return nil
	}
	if configure != nil {
		configure(f)
	}
	f.ServeUserManager(t, rt)
	m := *base
	m.lay.useV1 = false
	m.sdEndpoints = sdbus.UserManagerEndpoints(func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return rt
		}
		return ""
	}, 0)
	fs := &fakeScopes{m: &m, fake: f, manager: dir}
	fs.setTimeout(t, 3*time.Second)
	return fs
}

// setTimeout gives fs's Manager a new connection to the fake with
// request timeout d.
func (fs *fakeScopes) setTimeout(t *testing.T, d time.Duration) {
	fs.m.sdTimeout = d
	fs.m.sd = sdbus.NewClient(fs.m.sdEndpoints, 0, d)
	t.Cleanup(func() { fs.m.sd.Close() })
}

// create plans and creates a scope-backed cgroup the way Create does for
// a rootless caller without delegation (the test runs as root, whose own
// plan would never take this path).
func (fs *fakeScopes) create(t *testing.T, id string, l limits) (*Cgroup, error) {
	t.Helper()
	p, err := fs.m.planScope(l.required(), "/caller")
	if err != nil {
		return nil, err
	}
	return fs.m.createScope(id, p, l)
}

func (fs *fakeScopes) members() []string {
	var out []string
	for _, c := range fs.fake.Calls() {
		out = append(out, c.Member)
	}
	return out
}

func readRecord(t *testing.T, path string) record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestScopeWithFakeManager(t *testing.T) {
	fs := newFakeScopes(t, nil)
	avail, _ := readList(filepath.Join(fs.manager, "cgroup.controllers"))
	var l limits
	if slices.Contains(avail, Pids) {
		l.pids = 32 // only where the tree has the controller (the VM)
	}
	cg, err := fs.create(t, "scoped", l)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Delete()
	unit := "agentrun-scoped.scope"
	scopeDir := filepath.Join(fs.manager, unit)
	leaf := filepath.Join(scopeDir, "scoped")
	if !reflect.DeepEqual(cg.Paths(), []string{leaf}) || cg.FD() >= 0 {
		t.Fatalf("paths %v fd %d, want [%s] and no fd (the caller cannot clone into the scope)", cg.Paths(), cg.FD(), leaf)
	}
	if rec := readRecord(t, cg.record); rec.Scope != unit || !reflect.DeepEqual(rec.Paths, []string{leaf}) {
		t.Errorf("record: %+v", rec)
	}
	holder := cg.scope.hold.Process.Pid
	if b, _ := os.ReadFile(filepath.Join(scopeDir, "cgroup.procs")); len(parsePids(b)) != 0 {
		t.Errorf("the scope itself still holds %v: it must be an inner node", parsePids(b))
	}
	if b, _ := os.ReadFile(filepath.Join(scopeDir, holdLeaf, "cgroup.procs")); !reflect.DeepEqual(parsePids(b), []int{holder}) {
		t.Errorf("%s holds %v, want the holder %d", holdLeaf, parsePids(b), holder)
	}
	if l.pids > 0 {
		if got := readCg(t, cg, Pids, "pids.max"); got != "32" {
			t.Errorf("pids.max = %q", got)
		}
	}
	calls := fs.fake.Calls()
	start := calls[slices.IndexFunc(calls, func(c sdbustest.Call) bool { return c.Member == "StartTransientUnit" })]
	if start.Unit != unit || start.Mode != "fail" {
		t.Errorf("StartTransientUnit(%q, %q)", start.Unit, start.Mode)
	}
	want := map[string]sdbus.Variant{
		"PIDs":        {Sig: "au", Value: []any{uint32(holder)}},
		"Delegate":    {Sig: "b", Value: true},
		"CollectMode": {Sig: "s", Value: "inactive-or-failed"},
		"KillSignal":  {Sig: "i", Value: int32(9)},
		"Description": {Sig: "s", Value: "agentrun sandbox scoped"},
	}
	if !reflect.DeepEqual(start.Props, want) {
		t.Errorf("properties %#v\nwant %#v", start.Props, want)
	}
	// The sandbox's own process, placed by the manager (Add).
	s := startIn(t, cg, exec.Command("/bin/sh", "-c", "read x; sleep 300 & sleep 300"), false)
	if c := fs.fake.Calls(); c[len(c)-1].Member != "AttachProcessesToUnit" || c[len(c)-1].Sub != "/scoped" ||
		!reflect.DeepEqual(c[len(c)-1].PIDs, []uint32{uint32(s.cmd.Process.Pid)}) {
		t.Errorf("placement: %+v", c[len(c)-1])
	}
	s.go_(t)
	if err := cg.Kill(); err != nil {
		t.Fatal(err)
	}
	s.wait(t, 5*time.Second)
	if err := cg.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{leaf, scopeDir, cg.record} {
		if exists(p) {
			t.Errorf("%s left after Delete", p)
		}
	}
	if err := syscall.Kill(holder, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("holder %d still there after Delete: %v", holder, err)
	}
	// Each connection subscribed once; one for the start, and another
	// for Delete only when the first was closed as idle meanwhile.
	var got []string
	subscribed := 0
	for _, m := range fs.members() {
		if m == "Subscribe" {
			subscribed++
		} else {
			got = append(got, m)
		}
	}
	if !reflect.DeepEqual(got, []string{"Get", "StartTransientUnit", "AttachProcessesToUnit", "StopUnit"}) {
		t.Errorf("calls %v", fs.members())
	}
	if n := fs.fake.Dialed(); n > 2 || subscribed != n {
		t.Errorf("%d connections to the manager, %d Subscribe calls: want one or two, each subscribed once", n, subscribed)
	}
}

func TestScopeErrors(t *testing.T) {
	cases := []struct {
		name      string
		configure func(f *sdbustest.Manager)
		want      string // in the error
		kind      error
		stops     bool // Delete must stop the unit
	}{
		{"error reply", func(f *sdbustest.Manager) {
			f.OnStart = func(sdbustest.Call) (string, *sdbus.Error) {
				return "", &sdbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied", Message: "no"}
			}
		}, "refused the Delegate=yes scope", ErrNoDelegation, false},
		{"job failed", func(f *sdbustest.Manager) {
			f.OnStart = func(sdbustest.Call) (string, *sdbus.Error) { return "failed", nil }
		}, "(job failed;", ErrNoDelegation, true},
		// No answer: the unit may have been made, so it is stopped.
		{"manager hangs", func(f *sdbustest.Manager) { f.Hang = true }, "context deadline exceeded", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeScopes(t, tc.configure)
			fs.setTimeout(t, 500*time.Millisecond)
			began := time.Now()
			cg, err := fs.create(t, "broken", limits{})
			if err == nil {
				cg.Delete()
				t.Fatal("created")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Create: %v, want one line with %q", err, tc.want)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Errorf("want %v, got %v", tc.kind, err)
			}
			if d := time.Since(began); d > 3*time.Second {
				t.Errorf("Create took %v", d)
			}
			t.Log(err)
			if stopped := slices.Contains(fs.members(), "StopUnit"); stopped != tc.stops {
				t.Errorf("StopUnit called: %v, want %v (%v)", stopped, tc.stops, fs.members())
			}
			if ents, _ := os.ReadDir(fs.m.stateDir); len(ents) != 0 {
				t.Errorf("records left: %v", ents)
			}
		})
	}
}

// TestScopePlanRefusals: what planScope refuses before anything exists,
// each as one line that says how to get delegation.
func TestScopePlanRefusals(t *testing.T) {
	t.Run("no manager", func(t *testing.T) {
		m := testManager(t)
		if m.lay.v2 == nil {
			t.Skip("no cgroup2 tree")
		}
		m.sdEndpoints = sdbus.UserManagerEndpoints(func(string) string { return t.TempDir() }, 1000)
		m.euid = 1000
		_, err := m.planScope(nil, "/sys/fs/cgroup/user.slice/user-1000.slice/session-1.scope")
		if !errors.Is(err, ErrNoDelegation) || strings.Contains(err.Error(), "\n") ||
			!strings.Contains(err.Error(), "no systemd user manager is reachable") || !strings.Contains(err.Error(), "Delegate=yes") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("controller not delegated to the manager", func(t *testing.T) {
		fs := newFakeScopes(t, nil)
		avail, _ := readList(filepath.Join(fs.manager, "cgroup.controllers"))
		if slices.Contains(avail, Memory) {
			// In the VM every controller is there: take memory away.
			if err := writeFile(filepath.Join(filepath.Dir(fs.manager), "cgroup.subtree_control"), "-"+Memory); err != nil {
				t.Skipf("cannot take memory away from %s: %v", fs.manager, err)
			}
			defer writeFile(filepath.Join(filepath.Dir(fs.manager), "cgroup.subtree_control"), "+"+Memory)
		}
		_, err := fs.create(t, "nomem", limits{memory: 64 << 20})
		if !errors.Is(err, ErrNoController) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "Delegate=pids memory cpu") {
			t.Fatalf("got %v", err)
		}
		if got := fs.members(); !reflect.DeepEqual(got, []string{"Subscribe", "Get"}) {
			t.Errorf("calls %v: nothing may be started", got)
		}
		if ents, _ := os.ReadDir(fs.m.stateDir); len(ents) != 0 {
			t.Errorf("records written: %v", ents)
		}
	})
}

// TestScopeSweep: the records of a runtime killed with SIGKILL, with the
// scope made (paths known) and before that (paths unknown), are swept:
// processes killed, leaf removed, scope stopped.
func TestScopeSweep(t *testing.T) {
	fs := newFakeScopes(t, nil)
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ghost := *fs.m
	ghost.self = owner{pid: dead.Process.Pid, start: 1, pidns: fs.m.self.pidns}
	gfs := &fakeScopes{m: &ghost, fake: fs.fake, manager: fs.manager}

	placed, err := gfs.create(t, "placed", limits{})
	if err != nil {
		t.Fatal(err)
	}
	s := startIn(t, placed, exec.Command("/bin/sh", "-c", "read x; sleep 300"), false)
	s.go_(t)
	// A runtime that died between asking for the scope and recording its
	// cgroup: the record names the unit only.
	rec := record{Version: 1, ID: "unplaced", Parent: ghost.parent, V2: true, Scope: scopeUnit("unplaced"),
		OwnerPID: ghost.self.pid, OwnerStart: ghost.self.start, OwnerPidNS: ghost.self.pidns}
	if _, err := ghost.writeRecord(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(fs.manager, rec.Scope), 0o755); err != nil {
		t.Fatal(err)
	}

	n, err := fs.m.Sweep()
	if err != nil || n != 2 {
		t.Fatalf("Sweep: %d, %v; want 2", n, err)
	}
	s.wait(t, 5*time.Second)
	placed.scope.endHolder()
	for _, p := range []string{placed.Paths()[0], filepath.Join(fs.manager, "agentrun-placed.scope"),
		filepath.Join(fs.manager, rec.Scope), placed.record} {
		if exists(p) {
			t.Errorf("%s survived the sweep", p)
		}
	}
	if ents, _ := os.ReadDir(fs.m.stateDir); len(ents) != 0 {
		t.Errorf("records left: %v", ents)
	}
	stops := 0
	for _, c := range fs.fake.Calls() {
		if c.Member == "StopUnit" {
			stops++
		}
	}
	if stops != 2 {
		t.Errorf("%d StopUnit calls, want 2", stops)
	}
}

// TestSweepRefusesForeignScope: a record naming another unit is refused.
func TestSweepRefusesForeignScope(t *testing.T) {
	m := testManager(t)
	if m.lay.v2 == nil {
		t.Skip("no cgroup2 tree")
	}
	rec := record{Version: 1, ID: "x", Parent: "agentrun", V2: true, Scope: "user@1000.service"}
	if err := m.validRecord(rec); err == nil {
		t.Fatal("accepted a record naming another unit")
	}
	rec.Scope = scopeUnit("x")
	rec.Paths = []string{filepath.Join(m.lay.v2.mount, "agentrun-y.scope", "x")}
	if err := m.validRecord(rec); err == nil {
		t.Fatal("accepted a path outside the sandbox's scope")
	}
	rec.Paths = []string{filepath.Join(m.lay.v2.mount, "u", scopeUnit("x"), "x")}
	if err := m.validRecord(rec); err != nil {
		t.Fatal(err)
	}
}

// TestScopeRealUserManager: as a user whose cgroup is not delegated but
// who has a systemd user manager (vmtest mode user-systemd), limits go
// into a real transient scope, hold, and nothing is left afterwards.
func TestScopeRealUserManager(t *testing.T) {
	m := testManager(t)
	if os.Getenv("VMTEST_MODE") != "user-systemd" {
		if inf := m.Info(); !inf.Scope {
			t.Skip("no transient scope here (needs a rootless caller without delegation and a systemd user manager; vmtest mode user-systemd)")
		}
	}
	if err := m.Check(allLimits()); err != nil {
		t.Fatalf("limits through the user manager: %v", err)
	}
	cg := create(t, m, "real-scope", allLimits())
	if cg.scope == nil {
		t.Fatal("not scope-backed")
	}
	s := startIn(t, cg, helper("memhog"), false)
	dir := filepath.Dir(cg.Paths()[0])
	if filepath.Base(dir) != "agentrun-real-scope.scope" {
		t.Fatalf("cgroup %s is not in the sandbox's scope", cg.Paths()[0])
	}
	for file, want := range map[string]string{"memory.max": "67108864", "pids.max": "64", "cpu.max": "50000 100000"} {
		if got := readCg(t, cg, "", file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	s.go_(t)
	err := s.wait(t, 60*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
		t.Errorf("memhog: %v, want killed by the OOM killer", err)
	}
	st, err := cg.Stats()
	if err != nil || !st.OOMKilled {
		t.Errorf("stats %+v %v: want OOMKilled", st, err)
	}
	if err := cg.Delete(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for exists(dir) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if exists(dir) {
		t.Errorf("scope %s left after Delete", dir)
	}
}

// lifecycle runs one sandbox's whole life in a scope: Create, a process
// placed by the manager (Add), Kill, Delete; and checks nothing is left.
func (fs *fakeScopes) lifecycle(t *testing.T, id string) error {
	cg, err := fs.create(t, id, limits{})
	if err != nil {
		return err
	}
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		cg.Delete()
		return err
	}
	defer cmd.Wait()
	if err := cg.Add(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cg.Delete()
		return err
	}
	if err := cg.Kill(); err != nil {
		cg.Delete()
		return err
	}
	if err := cg.Delete(); err != nil {
		return err
	}
	for _, p := range []string{filepath.Join(fs.manager, scopeUnit(id)), cg.record} {
		if exists(p) {
			return fmt.Errorf("%s left after Delete", p)
		}
	}
	return nil
}

// TestScopeConcurrentSlowManager: sandboxes made and deleted by many
// goroutines at once through a manager that takes a while over each
// request. Each request gets its time limit (here well above what the
// manager needs for one, well below what it needs for all of them) for
// itself, not shared with the requests queued ahead of it, and all
// goroutines share one connection.
func TestScopeConcurrentSlowManager(t *testing.T) {
	// 16 sandboxes of several requests each at 100 ms a request take
	// well over the 2 s limit in all, while one request has 20 times the
	// time it needs: margin for an emulated VM (vmtest) under load.
	fs := newFakeScopes(t, func(f *sdbustest.Manager) { f.Latency = 100 * time.Millisecond })
	fs.setTimeout(t, 2*time.Second)
	const workers, rounds = 8, 2
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if err := fs.lifecycle(t, fmt.Sprintf("slow-%d-%d", w, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Shared: one, or a few if the manager was left idle for a second.
	if n := fs.fake.Dialed(); n >= workers {
		t.Errorf("%d connections to the manager for %d goroutines: want one shared by all of them", n, workers)
	}
	if u := fs.fake.Units(); len(u) != 0 {
		t.Errorf("units left: %v", u)
	}
}

// TestScopeFaults: a request the manager never saw, an answer it never
// sent, a connection it dropped: each is survived, by asking again where
// that is safe, and a scope is never asked for twice once it exists.
func TestScopeFaults(t *testing.T) {
	first := func(member string, f sdbustest.Fault) func(c sdbustest.Call, n int) sdbustest.Fault {
		return func(c sdbustest.Call, n int) sdbustest.Fault {
			if c.Member == member && n == 1 {
				return f
			}
			return sdbustest.Answer
		}
	}
	cases := []struct {
		name   string
		faults func(c sdbustest.Call, n int) sdbustest.Fault
		starts int // StartTransientUnit calls
	}{
		{"Get lost", first("Get", sdbustest.Lose), 1},
		{"hangup on Get", first("Get", sdbustest.Hangup), 1},
		{"hangup on Subscribe", first("Subscribe", sdbustest.Hangup), 1},
		// The manager never saw it: the unit does not exist, so it is
		// asked for again.
		{"start lost", first("StartTransientUnit", sdbustest.Lose), 2},
		{"hangup on start", first("StartTransientUnit", sdbustest.Hangup), 2},
		// The manager made the scope, the answer was lost: the unit
		// exists and is active, so it is used, not asked for again.
		{"start answer lost", first("StartTransientUnit", sdbustest.Mute), 1},
		// The job's end was lost with the connection.
		{"hangup after start", first("StartTransientUnit", sdbustest.AnswerHangup), 1},
		{"attach lost", first("AttachProcessesToUnit", sdbustest.Lose), 1},
		{"hangup on attach", first("AttachProcessesToUnit", sdbustest.Hangup), 1},
		{"stop answer lost", first("StopUnit", sdbustest.Mute), 1},
		{"hangup on stop", first("StopUnit", sdbustest.Hangup), 1},
		{"hangup after stop", first("StopUnit", sdbustest.AnswerHangup), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeScopes(t, func(f *sdbustest.Manager) { f.Faults = tc.faults })
			fs.setTimeout(t, 300*time.Millisecond)
			if err := fs.lifecycle(t, "faulty"); err != nil {
				t.Fatalf("%v (calls %v)", err, fs.members())
			}
			starts := 0
			for _, c := range fs.fake.Calls() {
				if c.Member == "StartTransientUnit" {
					starts++
				}
			}
			if starts != tc.starts {
				t.Errorf("%d StartTransientUnit calls, want %d (calls %v)", starts, tc.starts, fs.members())
			}
			if u := fs.fake.Units(); len(u) != 0 {
				t.Errorf("units left: %v", u)
			}
		})
	}
}

// TestScopeFirstMessageHeld: a manager that leaves the first message of
// each connection unread until more data arrives (systemd's sd-bus after
// BEGIN, at times, as in the VM) does not make a sandbox wait out a
// request's time limit.
func TestScopeFirstMessageHeld(t *testing.T) {
	fs := newFakeScopes(t, func(f *sdbustest.Manager) { f.HoldFirst = true })
	const timeout = 2 * time.Second
	fs.setTimeout(t, timeout)
	began := time.Now()
	if err := fs.lifecycle(t, "held"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > timeout {
		t.Errorf("took %v: a request waited out its time limit", d)
	}
}
