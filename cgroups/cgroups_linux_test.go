//go:build linux

package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// These tests build real cgroups. They run on whatever this host offers:
// the v1 driver on hybrid/legacy hosts (the development machines), the v2
// driver on unified hosts (`make vmtest`: root and a delegated user), and
// the fail-closed path for a user without delegation.

const helperEnv = "AGENTRUN_CGTEST_HELPER"

// TestMain doubles as the helper processes the tests put into cgroups: the
// test binary re-executed with helperEnv set. Helpers block on stdin first,
// the sync point at which the test places them.
func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "memhog":
		waitRelease()
		var keep [][]byte
		for i := 0; i < 1024; i++ { // 1 GiB at most: the limit must stop it long before
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println(len(keep), "MiB allocated without being killed")
		os.Exit(0)
	case "cpuburn":
		waitRelease()
		d, _ := time.ParseDuration(os.Getenv("AGENTRUN_CGTEST_DURATION"))
		end := time.Now().Add(d)
		var wg sync.WaitGroup
		for range runtime.NumCPU() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x := 0
				for time.Now().Before(end) {
					for i := 0; i < 1e5; i++ {
						x += i
					}
				}
				_ = x
			}()
		}
		wg.Wait()
		os.Exit(0)
	case "hold":
		// The holder of a transient scope: blocks until stdin closes.
		waitRelease()
		os.Exit(0)
	case "orphaner":
		// A runtime that creates a sandbox cgroup, starts a process in it
		// and waits to be SIGKILLed.
		m, err := NewManager(Options{StateDir: os.Getenv("AGENTRUN_CGTEST_STATE"), Parent: os.Getenv("AGENTRUN_CGTEST_PARENT"), ScopeHolder: testHolder, SystemdTimeout: testSystemdTimeout})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		cg, err := m.Create("sigkilled", resourcesFor(limits{pids: 16}))
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		cmd := exec.Command("sleep", "300")
		if cg.FD() >= 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
		}
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if cg.FD() < 0 {
			if err := cg.Add(cmd.Process.Pid); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
		}
		fmt.Println(cmd.Process.Pid, strings.Join(cg.Paths(), ","))
		select {}
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

func waitRelease() {
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		os.Exit(3)
	}
}

// testSystemdTimeout bounds each systemd conversation in these tests.
// The product's default (DefaultSystemdTimeout) is meant for one spawn at
// a time; TestConcurrentCreateDelete runs a hundred scope operations at
// once, and in the emulated VM of vmtest's user-systemd mode the user
// manager can take longer than that to get to one of them.
const testSystemdTimeout = 60 * time.Second

// testManager returns a Manager with a private state directory and a
// parent of this test process's own, so the assertions about what is left
// behind cannot be disturbed by real sandboxes.
func testManager(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(Options{StateDir: t.TempDir(), Parent: fmt.Sprintf("agentrun-test-%d", os.Getpid()), ScopeHolder: testHolder, SystemdTimeout: testSystemdTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func allLimits() *specs.LinuxResources {
	return resourcesFor(limits{memory: 64 << 20, pids: 64, cpuQuota: 50_000, cpuPeriod: 100_000})
}

// usableManager skips, with the reason, when this caller cannot use cgroups
// (TestFailClosed covers that case); root must always be able to.
func usableManager(t *testing.T) *Manager {
	t.Helper()
	m := testManager(t)
	if err := m.Check(allLimits()); err != nil {
		var ue *UnusableError
		if errors.As(err, &ue) && os.Geteuid() != 0 {
			t.Skipf("cgroups not usable by uid %d here (TestFailClosed covers this): %v", os.Geteuid(), err)
		}
		t.Fatalf("mode %s: %v", m.Mode(), err)
	}
	return m
}

func create(t *testing.T, m *Manager, id string, res *specs.LinuxResources) *Cgroup {
	t.Helper()
	cg, err := m.Create(id, res)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.Delete(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return cg
}

// started is a process held at its sync point (blocked reading stdin).
type started struct {
	cmd     *exec.Cmd
	release io.WriteCloser
	waited  chan error
}

// startIn starts cmd and places it in cg the way the spawn path does:
// CLONE_INTO_CGROUP on v2 (unless forceAdd), Add at the sync point
// otherwise. It verifies the placement before the caller releases it.
func startIn(t *testing.T, cg *Cgroup, cmd *exec.Cmd, forceAdd bool) *started {
	t.Helper()
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	viaFD := cg.FD() >= 0 && !forceAdd
	if viaFD {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: cmd, release: w, waited: make(chan error, 1)}
	t.Cleanup(func() {
		cmd.Process.Kill()
		w.Close()
		<-s.waited
	})
	go func() { s.waited <- cmd.Wait() }()
	if !viaFD {
		if err := cg.Add(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range cg.Paths() {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(parsePids(b), cmd.Process.Pid) {
			t.Fatalf("pid %d is not in %s before release (via fd: %v)", cmd.Process.Pid, dir, viaFD)
		}
	}
	return s
}

func (s *started) go_(t *testing.T) {
	t.Helper()
	if _, err := s.release.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
}

func (s *started) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-s.waited:
		s.waited <- err // for the cleanup
		return err
	case <-time.After(timeout):
		t.Fatalf("process %d did not exit within %v", s.cmd.Process.Pid, timeout)
	}
	return nil
}

func helper(kind string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+kind)...)
	return cmd
}

// assertGone checks that Delete left nothing: no cgroup directory, no
// parent made for it, no state record.
func assertGone(t *testing.T, m *Manager, cg *Cgroup) {
	t.Helper()
	if err := cg.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, d := range cg.dirs {
		for _, p := range []string{d.leaf, d.parent} {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still exists after Delete (%v)", p, err)
			}
		}
	}
	if ents, _ := os.ReadDir(m.stateDir); len(ents) != 0 {
		t.Errorf("state records left: %v", ents)
	}
}

func readCg(t *testing.T, cg *Cgroup, ctl, file string) string {
	t.Helper()
	d, ok := cg.dir(ctl)
	if !ok {
		t.Fatalf("no %s hierarchy", ctl)
	}
	b, err := os.ReadFile(filepath.Join(d, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestInfo(t *testing.T) {
	m := testManager(t)
	inf := m.Info()
	t.Logf("uid %d: %+v", os.Geteuid(), inf)
	if inf.Mode != m.Mode() {
		t.Fatalf("mode %s vs %s", inf.Mode, m.Mode())
	}
	if os.Geteuid() == 0 && inf.Mode != Unavailable {
		for _, c := range []string{Memory, Pids, CPU} {
			if !slices.Contains(inf.Usable, c) {
				t.Errorf("root cannot use %s: %+v", c, inf)
			}
		}
		if inf.Problem != "" {
			t.Errorf("root has a problem: %s", inf.Problem)
		}
	}
	if len(inf.Usable) == 0 && inf.Problem == "" {
		t.Errorf("nothing usable and no reason given: %+v", inf)
	}
}

func TestLimitsApplied(t *testing.T) {
	m := usableManager(t)
	cg := create(t, m, "limits", allLimits())
	if cg.V2() {
		for file, want := range map[string]string{"memory.max": "67108864", "pids.max": "64", "cpu.max": "50000 100000"} {
			if got := readCg(t, cg, "", file); got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
		if d, _ := cg.dir(Memory); exists(filepath.Join(d, "memory.swap.max")) {
			if got := readCg(t, cg, Memory, "memory.swap.max"); got != "0" {
				t.Errorf("memory.swap.max = %q, want 0", got)
			}
		}
	} else {
		for _, c := range []struct{ ctl, file, want string }{
			{Memory, "memory.limit_in_bytes", "67108864"},
			{Pids, "pids.max", "64"},
			{CPU, "cpu.cfs_quota_us", "50000"},
			{CPU, "cpu.cfs_period_us", "100000"},
		} {
			if got := readCg(t, cg, c.ctl, c.file); got != c.want {
				t.Errorf("%s = %q, want %q", c.file, got, c.want)
			}
		}
		if d, _ := cg.dir(Memory); exists(filepath.Join(d, "memory.memsw.limit_in_bytes")) {
			if got := readCg(t, cg, Memory, "memory.memsw.limit_in_bytes"); got != "67108864" {
				t.Errorf("memsw = %q, want the memory limit (no swap)", got)
			}
		}
		if _, ok := cg.dir(Freezer); !ok {
			t.Log("no freezer hierarchy: Kill falls back to signals only")
		}
	}
	// The same id twice is refused, never adopted.
	if _, err := m.Create("limits", nil); err == nil {
		t.Fatal("second Create with the same id succeeded")
	}
	assertGone(t, m, cg)
}

func TestForkBombContained(t *testing.T) {
	m := usableManager(t)
	cg := create(t, m, "forkbomb", resourcesFor(limits{pids: 64}))
	// The classic bomb; it only starts after the placement check below.
	s := startIn(t, cg, exec.Command("/bin/sh", "-c", "read x; f() { f | f & }; f; wait"), false)
	s.go_(t)
	time.Sleep(1500 * time.Millisecond)

	cur, err := strconv.Atoi(readCg(t, cg, Pids, "pids.current"))
	if err != nil {
		t.Fatal(err)
	}
	if cur > 64 {
		t.Fatalf("pids.current %d > 64", cur)
	}
	// The host still forks.
	if out, err := exec.Command("/bin/sh", "-c", "echo alive").Output(); err != nil || string(out) != "alive\n" {
		t.Fatalf("host cannot spawn during the bomb: %q %v", out, err)
	}
	st, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("during the bomb: pids.current=%d %+v", cur, st)
	if st.PidsLimitHits == 0 {
		t.Errorf("the bomb never hit pids.max: %+v", st)
	}
	if st.PidsPeak > 64 {
		t.Errorf("pids peak %d > 64", st.PidsPeak)
	}

	start := time.Now()
	if err := cg.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Kill took %v", time.Since(start))
	if pop, err := cg.Populated(); err != nil || pop {
		t.Fatalf("populated after Kill: %v %v", pop, err)
	}
	s.wait(t, 5*time.Second)
	assertGone(t, m, cg)
}

func TestMemoryOOM(t *testing.T) {
	m := usableManager(t)
	const limit = 64 << 20
	cg := create(t, m, "memhog", resourcesFor(limits{memory: limit}))
	s := startIn(t, cg, helper("memhog"), false)
	s.go_(t)
	err := s.wait(t, 30*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("memory hog was not killed: %v", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("memory hog ended with %v, want SIGKILL", ws)
	}
	st, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	if !st.OOMKilled {
		t.Fatalf("OOMKilled false: %+v", st)
	}
	if st.MemoryPeakBytes != 0 && (st.MemoryPeakBytes > limit+(4<<20) || st.MemoryPeakBytes < limit/2) {
		t.Errorf("memory peak %d not near the %d limit", st.MemoryPeakBytes, limit)
	}
	assertGone(t, m, cg)
}

func TestCPULimit(t *testing.T) {
	m := usableManager(t)
	q, p := CPUQuota(0.5)
	cg := create(t, m, "cpuburn", resourcesFor(limits{cpuQuota: q, cpuPeriod: p}))
	const burn = 2 * time.Second
	s := startIn(t, cg, helper("cpuburn", "AGENTRUN_CGTEST_DURATION="+burn.String()), false)
	before, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.go_(t)
	if err := s.wait(t, 20*time.Second); err != nil {
		t.Fatalf("burner: %v", err)
	}
	wall := time.Since(start)
	after, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	used := time.Duration(after.CPUUsageUS-before.CPUUsageUS) * time.Microsecond
	cores := used.Seconds() / wall.Seconds()
	t.Logf("%d CPUs, used %v over %v = %.2f cores (limit 0.5)", runtime.NumCPU(), used, wall, cores)
	if cores < 0.25 || cores > 0.75 {
		t.Fatalf("used %.2f cores under a 0.5 CPU limit", cores)
	}
	assertGone(t, m, cg)
}

// TestKillDaemonized: a double-forked, setsid'd grandchild does not escape.
func TestKillDaemonized(t *testing.T) {
	m := usableManager(t)
	cg := create(t, m, "daemon", nil)
	s := startIn(t, cg, exec.Command("/bin/sh", "-c", "read x; (setsid sleep 300 </dev/null >/dev/null 2>&1 &); sleep 300"), false)
	s.go_(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, _ := cg.procs()
		if len(p) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start: %v", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cg.Kill(); err != nil {
		t.Fatal(err)
	}
	if p, _ := cg.procs(); len(p) != 0 {
		t.Fatalf("left after Kill: %v", p)
	}
	s.wait(t, 5*time.Second)
	assertGone(t, m, cg)
}

// TestSignalKill exercises the freeze+SIGKILL loop on every driver (on v2
// it is the fallback for kernels without cgroup.kill) against a fork bomb.
func TestSignalKill(t *testing.T) {
	m := usableManager(t)
	cg := create(t, m, "sigkill", resourcesFor(limits{pids: 32}))
	s := startIn(t, cg, exec.Command("/bin/sh", "-c", "read x; f() { f | f & }; f; wait"), false)
	s.go_(t)
	time.Sleep(300 * time.Millisecond)
	if err := cg.signalKill(time.Now().Add(killTimeout)); err != nil {
		t.Fatal(err)
	}
	if pop, err := cg.Populated(); err != nil || pop {
		t.Fatalf("populated after signalKill: %v %v", pop, err)
	}
	s.wait(t, 5*time.Second)
	assertGone(t, m, cg)
}

// TestAddFallback places with Add even on v2, as the spawn path does when
// clone3 is refused.
func TestAddFallback(t *testing.T) {
	m := usableManager(t)
	cg := create(t, m, "addfallback", resourcesFor(limits{pids: 16}))
	s := startIn(t, cg, exec.Command("/bin/sh", "-c", "read x; exit 7"), true)
	s.go_(t)
	err := s.wait(t, 5*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("got %v, want exit 7", err)
	}
	assertGone(t, m, cg)
}

// TestDeleteKillsLeftovers: Delete without Kill still leaves nothing.
func TestDeleteKillsLeftovers(t *testing.T) {
	m := usableManager(t)
	cg := create(t, m, "leftover", nil)
	s := startIn(t, cg, exec.Command("/bin/sh", "-c", "read x; sleep 300 & sleep 300"), false)
	s.go_(t)
	time.Sleep(100 * time.Millisecond)
	assertGone(t, m, cg)
	s.wait(t, 5*time.Second)
}

// TestConcurrentCreateDelete races sandboxes sharing the parent, which
// each of them removes when it looks empty.
func TestConcurrentCreateDelete(t *testing.T) {
	m := usableManager(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				cg, err := m.Create(fmt.Sprintf("race-%d-%d", g, i), resourcesFor(limits{pids: 10}))
				if err != nil {
					errs <- err
					return
				}
				if err := cg.Delete(); err != nil {
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
	inf := m.Info()
	if _, err := os.Lstat(filepath.Join(inf.Base, m.parent)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("parent left behind: %v", err)
	}
}

func TestSweep(t *testing.T) {
	m := usableManager(t)

	// Nothing to sweep: no error, nothing removed, state dir absent.
	if n, err := m.Sweep(); n != 0 || err != nil {
		t.Fatalf("empty sweep: %d %v", n, err)
	}

	// A cgroup recorded by a runtime that has since died (a reaped child's
	// pid with a start time that can never match), with a process left in it.
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ghost := *m
	ghost.self = owner{pid: dead.Process.Pid, start: 1, pidns: m.self.pidns}
	orphan := create(t, &ghost, "orphan", resourcesFor(limits{pids: 16}))
	s := startIn(t, orphan, exec.Command("/bin/sh", "-c", "read x; sleep 300"), false)
	s.go_(t)

	// A live cgroup of this runtime, which must survive.
	live := create(t, m, "live", nil)

	n, err := m.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	s.wait(t, 5*time.Second) // its process was killed
	for _, p := range orphan.Paths() {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the sweep", p)
		}
	}
	if _, err := os.Lstat(orphan.record); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record survived the sweep")
	}
	for _, p := range live.Paths() {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("live cgroup swept: %v", err)
		}
	}
	if n, err := m.Sweep(); n != 0 || err != nil {
		t.Fatalf("second sweep: %d %v", n, err)
	}
	assertGone(t, m, live)
}

// TestSweepAfterSIGKILL: a runtime killed with SIGKILL leaves its cgroup
// and its sandbox's process; the next runtime's Sweep removes both.
func TestSweepAfterSIGKILL(t *testing.T) {
	m := usableManager(t)
	// Orphans are reparented to us, so the test can reap the sandbox's
	// process and see how it died.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)

	rt := helper("orphaner", "AGENTRUN_CGTEST_STATE="+m.stateDir, "AGENTRUN_CGTEST_PARENT="+m.parent)
	var stderr bytes.Buffer
	rt.Stderr = &stderr
	out, err := rt.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	var l string
	// A hang guard, not a timing assertion: on a rootless v2 host the
	// helper's scope takes a few systemd conversations of up to
	// testSystemdTimeout each, and an emulated VM whose user manager is
	// still stopping the scopes of earlier tests is slow.
	select {
	case l = <-line:
	case <-time.After(3 * testSystemdTimeout):
		rt.Process.Kill()
		rt.Wait()
		t.Fatalf("the runtime helper did not report; its stderr:\n%s", stderr.String())
	}
	var pid int
	var paths string
	if _, err := fmt.Sscan(l, &pid, &paths); err != nil || pid <= 0 {
		rt.Process.Kill()
		rt.Wait()
		t.Fatalf("runtime helper said %q", l)
	}
	rt.Process.Signal(syscall.SIGKILL)
	rt.Wait()

	for _, p := range strings.Split(paths, ",") {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the dead runtime's cgroup is already gone: %v", err)
		}
	}
	n, err := m.Sweep()
	if err != nil || n != 1 {
		t.Fatalf("Sweep: %d, %v; want 1", n, err)
	}
	for _, p := range strings.Split(paths, ",") {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the sweep", p)
		}
		if _, err := os.Lstat(filepath.Dir(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("parent %s survived the sweep", filepath.Dir(p))
		}
	}
	reaped := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
		reaped <- ws
	}()
	select {
	case ws := <-reaped:
		if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
			t.Errorf("sandbox process ended with %v, want SIGKILL", ws)
		}
	case <-time.After(5 * time.Second):
		unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("sandbox process %d survived the sweep", pid)
	}
	if ents, _ := os.ReadDir(m.stateDir); len(ents) != 0 {
		t.Errorf("records left: %v", ents)
	}
}

func TestSweepRefusesForeignPaths(t *testing.T) {
	m := testManager(t)
	if err := os.MkdirAll(m.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	victim := t.TempDir()
	rec := fmt.Sprintf(`{"version":1,"id":"x","parent":"agentrun","v2":true,"paths":[%q],"owner_pid":1,"owner_start":1,"owner_pidns":%d}`,
		filepath.Join(victim, "agentrun", "x"), m.self.pidns)
	if err := os.WriteFile(filepath.Join(m.stateDir, "x.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(victim, "agentrun", "x"), 0o755)
	n, err := m.Sweep()
	if n != 0 || err == nil || !strings.Contains(err.Error(), "not a sandbox cgroup") {
		t.Fatalf("got %d, %v; want a refusal", n, err)
	}
	if _, err := os.Stat(filepath.Join(victim, "agentrun", "x")); err != nil {
		t.Fatal("sweep removed a directory outside cgroupfs")
	}
}

func TestV2BaseSkipsCallerLeaf(t *testing.T) {
	m := &Manager{euid: 1000, lay: layout{v2: &hierarchy{mount: "/sys/fs/cgroup", caller: "/sys/fs/cgroup/user-1000/agentrun-caller"}}}
	if b, err := m.v2Base(); err != nil || b != "/sys/fs/cgroup/user-1000" {
		t.Fatalf("%q %v", b, err)
	}
	m.lay.v2.caller = "/sys/fs/cgroup/user-1000"
	if b, _ := m.v2Base(); b != "/sys/fs/cgroup/user-1000" {
		t.Fatal(b)
	}
	m.euid = 0
	if b, _ := m.v2Base(); b != "/sys/fs/cgroup" {
		t.Fatal(b)
	}
}

// TestFailClosed: a caller who cannot use cgroups gets an *UnusableError
// saying, in one line, what is missing, and nothing is created. It runs
// directly for a non-root user (the vmtest "user-nodeleg" mode) and, on
// hosts with the artest user, through TestFailClosedAsArtest.
func TestFailClosed(t *testing.T) {
	expect := os.Getenv("AGENTRUN_CGTEST_EXPECT_FAILCLOSED") == "1"
	m := testManager(t)
	err := m.Check(allLimits())
	if err == nil {
		if expect {
			t.Fatalf("uid %d can use cgroups here (mode %s); expected the fail-closed error", os.Geteuid(), m.Mode())
		}
		t.Skipf("uid %d can use cgroups here (mode %s)", os.Geteuid(), m.Mode())
	}
	t.Logf("uid %d, mode %s: %v", os.Geteuid(), m.Mode(), err)
	if !errors.Is(err, ErrNoDelegation) {
		t.Fatalf("want ErrNoDelegation, got %T %v", err, err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "uid "+strconv.Itoa(os.Geteuid())) || !strings.Contains(msg, "Delegate=yes") {
		t.Errorf("message is not the promised one-liner: %q", msg)
	}
	cg, cerr := m.Create("failclosed", allLimits())
	if cerr == nil || !errors.Is(cerr, ErrNoDelegation) || cerr.Error() != msg {
		if cg != nil {
			cg.Delete()
		}
		t.Fatalf("Create: %v, want the same error as Check", cerr)
	}
	// No limit asked: still unusable, so the caller runs without a cgroup.
	var ue *UnusableError
	if _, err := m.Create("failclosed", nil); !errors.As(err, &ue) {
		t.Fatalf("Create without limits: %v, want an *UnusableError", err)
	}
	if ents, _ := os.ReadDir(m.stateDir); len(ents) != 0 {
		t.Errorf("state records written: %v", ents)
	}
	if inf := m.Info(); len(inf.Usable) != 0 || inf.Problem != msg {
		t.Errorf("Info disagrees: %+v", inf)
	}
}

// TestFailClosedAsArtest runs TestFailClosed as the unprivileged user
// artest (which exists on the development hosts), from a copy of this test
// binary in /tmp, and requires the fail-closed error.
func TestFailClosedAsArtest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to artest")
	}
	u, err := user.Lookup("artest")
	if err != nil {
		t.Skip("no artest user on this host")
	}
	su, err := exec.LookPath("su")
	if err != nil {
		t.Skip("no su")
	}
	m := testManager(t)
	if m.Mode() == Unified {
		// Whether a user is delegated to is the VM harness's business
		// (modes user and user-nodeleg); artest has no delegation there
		// unless someone gave it one.
		t.Logf("unified host: artest is expected to have no delegated subtree")
	}
	dir, err := os.MkdirTemp("", "agentrun-cgtest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "cgroups.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(su, "-s", "/bin/sh", u.Username, "-c",
		"cd / && AGENTRUN_CGTEST_EXPECT_FAILCLOSED=1 "+bin+" -test.run '^TestFailClosed$' -test.v -test.count=1")
	out, err := cmd.CombinedOutput()
	t.Logf("as artest (uid %s):\n%s", u.Uid, out)
	if err != nil {
		t.Fatalf("TestFailClosed as artest: %v", err)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestFailClosed")) {
		t.Fatal("TestFailClosed did not pass as artest")
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Delegate=yes") {
			return
		}
	}
	t.Fatal("the one-line error was not shown")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestV2DriverOnHybridUnifiedTree runs the v2 driver on a hybrid host's
// cgroup2 tree, which carries no resource controller: placement with
// CLONE_INTO_CGROUP, cgroup.kill, the freeze fallback, Delete and the
// fail-closed ErrNoController all work there, so they are covered on the
// development hosts too (the limits themselves are covered by make vmtest).
func TestV2DriverOnHybridUnifiedTree(t *testing.T) {
	m := testManager(t)
	if m.Mode() != Hybrid || m.lay.v2 == nil {
		t.Skipf("mode %s: only hybrid hosts have a spare cgroup2 tree", m.Mode())
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the hybrid host's cgroup2 tree is root-owned")
	}
	v2 := *m
	v2.lay.useV1 = false
	err := v2.Check(resourcesFor(limits{pids: 10}))
	if !errors.Is(err, ErrNoController) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("limits on a controller-less tree: %v, want a one-line ErrNoController", err)
	}
	t.Log(err)

	for _, kill := range []string{"cgroup.kill", "freeze"} {
		cg := create(t, &v2, "v2-"+strings.ReplaceAll(kill, ".", "-"), nil)
		if cg.FD() < 0 || !cg.V2() {
			t.Fatalf("no v2 fd: %+v", cg)
		}
		s := startIn(t, cg, exec.Command("/bin/sh", "-c",
			"read x; for i in 1 2 3 4 5 6 7 8; do sleep 300 & done; (setsid sleep 300 </dev/null >/dev/null 2>&1 &); sleep 300"), false)
		s.go_(t)
		deadline := time.Now().Add(5 * time.Second)
		for p, _ := cg.procs(); len(p) < 10; p, _ = cg.procs() {
			if time.Now().After(deadline) {
				t.Fatalf("tree did not start: %v", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if kill == "cgroup.kill" {
			err = cg.Kill()
		} else {
			err = cg.signalKill(time.Now().Add(killTimeout))
		}
		if err != nil {
			t.Fatalf("%s: %v", kill, err)
		}
		if pop, err := cg.Populated(); pop || err != nil {
			t.Fatalf("%s: populated %v %v", kill, pop, err)
		}
		s.wait(t, 5*time.Second)
		st, err := cg.Stats()
		if err != nil || st.CPUUsageUS == 0 {
			t.Errorf("stats %+v %v (cpu.stat is always there on v2)", st, err)
		}
		assertGone(t, &v2, cg)
	}
}

// The spawn path pays for Sweep, Create and Delete on every sandbox.
func BenchmarkSweepNothing(b *testing.B) {
	m, err := NewManager(Options{StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := m.Sweep(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCreateDelete(b *testing.B) {
	m, err := NewManager(Options{StateDir: b.TempDir(), Parent: fmt.Sprintf("agentrun-bench-%d", os.Getpid())})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Check(allLimits()); err != nil {
		b.Skip(err)
	}
	i := 0
	for b.Loop() {
		i++
		cg, err := m.Create("bench-"+strconv.Itoa(i), allLimits())
		if err != nil {
			b.Fatal(err)
		}
		if err := cg.Delete(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLimitsOnly: a LimitsOnly v1 sandbox is in the hierarchies that
// enforce its limits and in no other, and the limit still holds there; a
// default Manager joins the others too (the control).
func TestLimitsOnly(t *testing.T) {
	full := usableManager(t)
	if full.lay.v2 != nil && !full.lay.useV1 {
		t.Skip("cgroup v2: one hierarchy, LimitsOnly changes nothing (this host runs v2)")
	}
	lean, err := NewManager(Options{StateDir: t.TempDir(), Parent: fmt.Sprintf("agentrun-test-%d-lean", os.Getpid()), ScopeHolder: testHolder, LimitsOnly: true, SystemdTimeout: testSystemdTimeout})
	if err != nil {
		t.Fatal(err)
	}
	res := resourcesFor(limits{pids: 16})
	all := create(t, full, "limits-full", res)
	if len(all.Paths()) < 2 {
		t.Skipf("only %d usable v1 hierarchy here (%v): nothing to leave out", len(all.Paths()), all.Paths())
	}
	cg := create(t, lean, "limits-only", res)
	if len(cg.Paths()) != 1 {
		t.Fatalf("LimitsOnly with a pids limit: %d hierarchies %v, want the pids one alone", len(cg.Paths()), cg.Paths())
	}
	if _, ok := cg.dir(Pids); !ok {
		t.Fatalf("LimitsOnly left out the pids hierarchy: %v", cg.Paths())
	}
	if got := readCg(t, cg, Pids, "pids.max"); got != "16" {
		t.Errorf("pids.max = %q, want 16", got)
	}
	pidsDir, _ := cg.dir(Pids)
	for _, ctl := range []string{CPUAcct, Freezer, Memory, CPU} {
		if d, ok := cg.dir(ctl); ok && d != pidsDir {
			t.Errorf("LimitsOnly joined %s at %s", ctl, d)
		}
	}
	s := startIn(t, cg, helper("hold"), false)
	self, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	in := 0
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		if strings.HasSuffix(line, "/limits-only") {
			in++
			if f := strings.SplitN(line, ":", 3); len(f) != 3 || !slices.Contains(strings.Split(f[1], ","), Pids) {
				t.Errorf("LimitsOnly process is in a hierarchy without a limit: %s", line)
			}
		}
	}
	if in != 1 {
		t.Errorf("LimitsOnly process is in %d sandbox hierarchies, want 1:\n%s", in, self)
	}
	s.go_(t)
	if err := s.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	assertGone(t, lean, cg)
}

func TestParseExpressID(t *testing.T) {
	for _, tc := range []struct {
		name string
		want owner
		ok   bool
	}{
		{"sbe-123-4567-4026531836-00ff00ff00ff00ff", owner{pid: 123, start: 4567, pidns: 4026531836}, true},
		{"sbe-1-0-1-0123456789abcdef", owner{pid: 1, start: 0, pidns: 1}, true},
		{"sbx-123-00ff00ff00ff00ff", owner{}, false},                   // Go's, with a record
		{"sbe-0-4567-4026531836-00ff00ff00ff00ff", owner{}, false},     // no pid 0
		{"sbe-2147483648-1-1-00ff00ff00ff00ff", owner{}, false},        // beyond a pid
		{"sbe-123-4567-4026531836-00FF00FF00FF00FF", owner{}, false},   // the C side writes lower case
		{"sbe-123-4567-4026531836-00ff00ff00ff00f", owner{}, false},    // 15 digits
		{"sbe-123-4567-00ff00ff00ff00ff", owner{}, false},              // a field short
		{"sbe-123-4567-4026531836-00ff00ff00ff00ff-x", owner{}, false}, // one too many
		{"sbe--123-4567-4026531836-00ff00ff00ff00ff", owner{}, false},  // signs are not digits
		{"sbe-+123-4567-4026531836-00ff00ff00ff00ff", owner{}, false},  //
		{"sbe-12a-4567-4026531836-00ff00ff00ff00ff", owner{}, false},   //
		{"sbe-123-4567-4026531836-0x0f00ff00ff00ff", owner{}, false},   //
		{"pids.max", owner{}, false},                                   // a cgroup's own file
	} {
		got, ok := parseExpressID(tc.name)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseExpressID(%q) = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestCreateRefusesExpressNames: Sweep judges an sbe- cgroup by its name
// alone, so Create must not make one, whatever its record would say.
func TestCreateRefusesExpressNames(t *testing.T) {
	m := testManager(t)
	_, err := m.Create("sbe-1-2-3-0123456789abcdef", nil)
	if err == nil || !strings.Contains(err.Error(), "express") {
		t.Fatalf("Create with an express name: %v, want a refusal", err)
	}
}

// TestSweepExpress: the express path's cgroups have no state record, only
// a name that says whose they are (sbe-PID-START-PIDNS-RANDOM). Sweep
// removes one whose owner is gone, killing what is left inside, and leaves
// a live owner's, one from another PID namespace (whose pids it cannot
// judge) and anything not named so.
func TestSweepExpress(t *testing.T) {
	m := usableManager(t)
	var dir string
	var ctls []string
	for _, h := range m.lay.v1 {
		if m.lay.useV1 && h.has(Pids) && m.v1Problem(h) == nil {
			dir, ctls = filepath.Join(h.caller, m.parent), h.controllers
		}
	}
	if dir == "" {
		t.Skipf("the express path makes cgroups on v1 hosts only, in the pids hierarchy; this host is %s", m.Mode())
	}
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	name := func(o owner) string {
		return fmt.Sprintf("sbe-%d-%d-%d-0123456789abcdef", o.pid, o.start, o.pidns)
	}
	// Another live runtime, judged through /proc as any other owner.
	other := exec.Command("/bin/sleep", "300")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	otherOwner, err := ownerOf(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stale := name(owner{pid: dead.Process.Pid, start: 1, pidns: m.self.pidns})
	foreign := name(owner{pid: dead.Process.Pid, start: 2, pidns: m.self.pidns}) // another user's
	keep := []string{
		name(m.self),     // this runtime
		name(otherOwner), // another live one
		name(owner{pid: dead.Process.Pid, start: 1, pidns: m.self.pidns + 1}), // another PID namespace
		"sbe-" + strconv.Itoa(dead.Process.Pid) + "-1",                        // not an express name
		"sbx-" + strconv.Itoa(dead.Process.Pid) + "-0123456789abcdef",         // Go's, which has a record
		foreign,
	}
	for _, n := range append([]string{stale}, keep...) {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// cgroupfs gives a cgroup its creator's uid; this one looks made by
	// another user, whose runtimes are not this one's to judge.
	if err := os.Lchown(filepath.Join(dir, foreign), m.euid+1, -1); err != nil {
		t.Fatalf("chown %s: %v", foreign, err)
	}
	t.Cleanup(func() {
		for _, n := range append([]string{stale}, keep...) {
			_ = unix.Rmdir(filepath.Join(dir, n))
		}
		_ = unix.Rmdir(dir)
	})
	// What a killed runtime's sandbox might leave running in its cgroup.
	left := exec.Command("/bin/sleep", "300")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- left.Wait() }()
	// Before the directories go (cleanups run last first): a cgroup with
	// a task left in it cannot be removed.
	t.Cleanup(func() { _ = left.Process.Kill(); <-done })
	if err := writeFile(filepath.Join(dir, stale, "tasks"), strconv.Itoa(left.Process.Pid)); err != nil {
		t.Fatal(err)
	}

	n, err := m.Sweep()
	if err != nil || n != 1 {
		t.Fatalf("Sweep: %d, %v; want 1 (the %v hierarchy's %s)", n, err, ctls, stale)
	}
	if _, err := os.Lstat(filepath.Join(dir, stale)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s survived the sweep: %v", stale, err)
	}
	select {
	case err := <-done:
		done <- err // for the cleanup
		if ws, ok := left.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the process left in the swept cgroup ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the process left in the swept cgroup survived the sweep")
	}
	for _, n := range keep {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s swept: %v", n, err)
		}
	}
	if n, err := m.Sweep(); n != 0 || err != nil {
		t.Errorf("second sweep: %d, %v; want nothing", n, err)
	}
}

// TestOwnerAliveZombie: an owner that exited and waits to be reaped holds
// nothing; its records are swept at once rather than after its reaper
// gets round to it. Positive control: the same process before it exits.
func TestOwnerAliveZombie(t *testing.T) {
	m := &Manager{}
	var err error
	if m.self, err = ownerOf(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "100")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	o, err := ownerOf(child.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	rec := record{OwnerPID: o.pid, OwnerStart: o.start, OwnerPidNS: o.pidns}
	if !m.ownerAlive(rec) {
		t.Fatal("a running owner is taken for dead")
	}
	// Killed but not waited for: a zombie until Wait below.
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for m.ownerAlive(rec) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m.ownerAlive(rec) {
		t.Error("a zombie owner is taken for alive")
	}
}
