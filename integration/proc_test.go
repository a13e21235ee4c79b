//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHostProcessesInvisible attacks host processes: seeing them in /proc,
// signalling them, pidfd_open and ptrace. The host process runs as the same
// user as the caller, which in rootless mode is the sandbox's own host uid.
func TestHostProcessesInvisible(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	marker := token("agentrun-host-proc-")
	host, done := hostProcess(t, marker)
	pid := strconv.Itoa(host.Process.Pid)

	mustBlock(t, attack(t, ws, nil, "pidscan", marker), "find the host process in /proc")
	if r := attack(t, ws, nil, "read", "/proc/"+pid+"/cmdline"); strings.Contains(r.stdout, marker) {
		t.Errorf("SANDBOX ESCAPE: /proc/%s/cmdline inside shows the host process\n%s", pid, r)
	}
	mustBlock(t, attack(t, ws, nil, "kill", pid, "0"), "kill -0 host pid "+pid)
	mustBlock(t, attack(t, ws, nil, "kill", pid, "9"), "kill -9 host pid "+pid)
	mustBlock(t, attack(t, ws, nil, "pidfd", pid), "pidfd_open host pid "+pid)
	mustBlock(t, attack(t, ws, nil, "ptrace", pid), "ptrace host pid "+pid)
	mustBlock(t, attack(t, ws, nil, "kill", "-1", "9"), "kill(-1, SIGKILL)")
	r := sh(t, ws, nil, "kill -0 "+pid+" 2>/dev/null && echo VISIBLE; kill -KILL "+pid+" 2>/dev/null && echo KILLED; exit 0")
	if strings.Contains(r.stdout, "VISIBLE") || strings.Contains(r.stdout, "KILLED") {
		t.Errorf("SANDBOX ESCAPE: the shell could signal host pid %s\n%s", pid, r)
	}
	if !alive(done) {
		t.Errorf("SANDBOX ESCAPE: the host process %s (%s) was killed from inside the sandbox", pid, marker)
	}

	// Positive control: pidscan finds processes that are in the sandbox.
	// The shell waits until its background child has exec'd (before that,
	// or in the middle of the exec, its cmdline is not the marker).
	r = sh(t, ws, nil, "/workspace/attacker sleep 30 & until tr '\\0' ' ' < /proc/$!/cmdline | grep -q 'attacker sleep'; do :; done; exec /workspace/attacker pidscan 'attacker sleep'")
	mustSucceed(t, r, "pidscan of a process inside the sandbox")
	r = sh(t, ws, nil, "sleep 30 & kill -0 $! && kill $! && echo SIGNALLED")
	if !strings.Contains(r.stdout, "SIGNALLED") {
		t.Errorf("positive control: the sandbox cannot signal its own child\n%s", r)
	}
}

// TestHostIPCInvisible: SysV IPC objects of the host (a world-readable
// shared memory segment) are not reachable from the sandbox's IPC namespace.
func TestHostIPCInvisible(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	secret := token("agentrun-shm-secret-")
	key := int(time.Now().UnixNano()&0x3fffffff) | 0x40000000
	id, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o666)
	if err != nil {
		t.Skipf("cannot create a SysV shared memory segment on the host: %v", err)
	}
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	b, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, secret)
	_ = unix.SysvShmDetach(b)

	out, _ := exec.Command(attackerBin, "shmget", strconv.Itoa(key)).Output()
	if !strings.Contains(string(out), secret) {
		t.Fatalf("control: the attacker cannot read the segment on the host either: %s", out)
	}
	r := attack(t, ws, nil, "shmget", strconv.Itoa(key))
	mustBlock(t, r, "attach the host's SysV shared memory segment")
	if strings.Contains(r.stdout, secret) {
		t.Errorf("the host segment's content leaked")
	}
}

// TestRuntimeBinaryIntegrity attacks the agentrun binary through /proc (the
// runc CVE-2019-5736 shape): PID 1 inside is a re-exec of it. The binary
// under test is a private copy owned by the user running agentrun, so that
// file permissions alone would allow the write. As root, the rootless
// variant runs as the unprivileged test user with a copy owned by it.
func TestRuntimeBinaryIntegrity(t *testing.T) {
	t.Parallel()
	type variant struct {
		name string
		sys  *syscall.SysProcAttr
		uid  int
		gid  int
	}
	variants := []variant{{name: fmt.Sprintf("as uid %d", os.Geteuid()), uid: -1, gid: -1}}
	if isRoot() {
		if u := testUser(t); u != nil {
			sys := credential(t, u)
			variants = append(variants, variant{name: "rootless as " + u.Username, sys: sys, uid: int(sys.Credential.Uid), gid: int(sys.Credential.Gid)})
		} else {
			t.Logf("no unprivileged test user ($%s): the rootless variant runs when the suite itself runs unprivileged", envTestUser)
		}
	}
	attacks := []struct {
		name string
		sub  []string
	}{
		{"open /proc/1/exe for writing", []string{"exe-write", "/proc/1/exe"}},
		{"open /proc/1/exe read-only", []string{"open", "/proc/1/exe", "r"}},
		{"open /proc/1/exe O_PATH", []string{"open", "/proc/1/exe", "path"}},
		{"reopen /proc/1/fd/* for writing", []string{"fd-reopen", "/proc/1/fd"}},
		{"list /proc/1/map_files", []string{"ls", "/proc/1/map_files"}},
		{"reopen /proc/1/map_files/* for writing", []string{"fd-reopen", "/proc/1/map_files"}},
		{"open /proc/1/mem", []string{"open", "/proc/1/mem", "rw"}},
		{"list /proc/1/root", []string{"ls", "/proc/1/root"}},
		{"read /proc/1/environ", []string{"read", "/proc/1/environ"}},
		{"ptrace PID 1", []string{"ptrace", "1"}},
		{"process_vm_readv PID 1", []string{"vmread", "1"}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			dir := tempDir(t)
			bin := filepath.Join(dir, "agentrun")
			copyFile(t, agentrunBin, bin, 0o755)
			ws := newWorkspace(t)
			if v.uid >= 0 {
				chownTree(t, dir, v.uid, v.gid)
				chownTree(t, ws, v.uid, v.gid)
			}
			before := sha256File(t, bin)
			for _, a := range attacks {
				r := spawn(t, spawnCfg{ws: ws, bin: bin, sys: v.sys}, append([]string{"/workspace/attacker"}, a.sub...)...)
				mustBlock(t, r, a.name)
			}
			// The shell way, too.
			r := spawn(t, spawnCfg{ws: ws, bin: bin, sys: v.sys}, "/bin/sh", "-c",
				"(exec 3>>/proc/1/exe) && echo OPENED-FOR-WRITE; (exec 4<>/proc/1/exe) && echo OPENED-RDWR; cat /proc/1/exe > /workspace/exe-copy && echo COPIED; /proc/1/exe version && echo EXECUTED; exit 0")
			if strings.Contains(r.stdout, "OPENED") {
				t.Errorf("SANDBOX ESCAPE: a shell opened /proc/1/exe for writing\n%s", r)
			}
			mustExit(t, r, 0, "shell attempts on /proc/1/exe (script must run to its end)")
			if strings.Contains(r.stdout, "EXECUTED") {
				t.Errorf("the sandbox could execute PID 1's binary through /proc/1/exe\n%s", r)
			}
			if strings.Contains(r.stdout, "COPIED") {
				t.Errorf("the sandbox could read the runtime binary through /proc/1/exe (first step of CVE-2019-5736)\n%s", r)
			}
			if after := sha256File(t, bin); after != before {
				t.Errorf("SANDBOX ESCAPE: the agentrun binary %s changed: sha256 %s -> %s", bin, before, after)
			}
			// Positive control: the copy still works and runs sandboxes.
			r = spawn(t, spawnCfg{ws: ws, bin: bin, sys: v.sys}, "/bin/true")
			mustExit(t, r, 0, "the agentrun copy after the attacks")
		})
	}
}

// TestNoOrphansSurvive: nothing started in the sandbox outlives it.
func TestNoOrphansSurvive(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		script func(m []string) string
	}{
		{"setsid, disown and nohup", func(m []string) string {
			return fmt.Sprintf("setsid sleep %s </dev/null >/dev/null 2>&1 & nohup sleep %s </dev/null >/dev/null 2>&1 & exit 0", m[0], m[1])
		}},
		{"double-forked daemon", func(m []string) string {
			return fmt.Sprintf(`( sh -c 'cd /; setsid sleep %s </dev/null >/dev/null 2>&1 &' & ); ( ( trap "" HUP TERM; exec sleep %s ) </dev/null >/dev/null 2>&1 & ); exit 0`, m[0], m[1])
		}},
		{"python daemon", func(m []string) string {
			return fmt.Sprintf(`python3 -c 'import os,sys,time
if os.fork(): sys.exit(0)
os.setsid()
if os.fork(): sys.exit(0)
os.closerange(0, 3)
os.execvp("sleep", ["sleep", "%s"])' & sleep 0.3; setsid sleep %s </dev/null >/dev/null 2>&1 & exit 0`, m[0], m[1])
		}},
		{"grandchild in a nested user and pid namespace", func(m []string) string {
			return fmt.Sprintf("unshare -U -r -p -f sleep %s </dev/null >/dev/null 2>&1 & sleep %s </dev/null >/dev/null 2>&1 & sleep 0.3; exit 0", m[0], m[1])
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := newWorkspace(t)
			m := []string{fmt.Sprintf("%d.%06d1", 300+2*i, time.Now().UnixNano()%1000000), fmt.Sprintf("%d.%06d2", 301+2*i, time.Now().UnixNano()%1000000)}
			r := sh(t, ws, nil, tc.script(m))
			mustExit(t, r, 0, "the launching shell")
			mustNotSurvive(t, tc.name, m...)
		})
	}
}

// TestKilledRuntimeTakesSandboxDown: SIGKILL to agentrun itself (no chance
// to clean up) still ends everything in the sandbox.
func TestKilledRuntimeTakesSandboxDown(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	m := fmt.Sprintf("333.%06d", time.Now().UnixNano()%1000000)
	run := startSpawn(t, spawnCfg{ws: ws}, "/bin/sh", "-c", "setsid sleep "+m+" </dev/null >/dev/null 2>&1 & echo started > /workspace/ready; wait")
	waitForFile(t, filepath.Join(ws, "ready"), 10*time.Second)
	if len(hostProcsWith(m)) == 0 {
		t.Fatalf("the sandboxed sleep %s is not visible on the host; the test cannot observe it", m)
	}
	if err := syscall.Kill(run.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := run.wait()
	mustExit(t, r, 128+int(syscall.SIGKILL), "agentrun after SIGKILL")
	mustNotSurvive(t, "sandbox after agentrun was SIGKILLed", m)
}

func waitForFile(t *testing.T, p string, guard time.Duration) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !exists(p) {
		if time.Now().After(deadline) {
			t.Fatalf("hang guard: %s did not appear within %v", p, guard)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTimeoutKillsTree: --timeout kills the whole tree, including children
// that ignore SIGTERM and ones in their own session, and exits 124.
func TestTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	res := filepath.Join(tempDir(t), "result.json")
	m := []string{fmt.Sprintf("340.%06d", time.Now().UnixNano()%1000000), fmt.Sprintf("341.%06d", time.Now().UnixNano()%1000000), fmt.Sprintf("342.%06d", time.Now().UnixNano()%1000000)}
	script := fmt.Sprintf(`trap "" TERM INT HUP
( trap "" TERM INT HUP; exec sleep %s ) &
setsid sh -c 'trap "" TERM; sleep %s' &
sh -c 'trap "" TERM; exec sleep %s' </dev/null >/dev/null 2>&1 &
while :; do sleep 1; done`, m[0], m[1], m[2])
	r := spawn(t, spawnCfg{ws: ws, flags: []string{"--timeout", "1s", "--result", res}, guard: 10 * time.Second}, "/bin/sh", "-c", script)
	mustExit(t, r, 124, "--timeout 1s")
	if r.dur > 10*time.Second {
		t.Errorf("hang guard: --timeout 1s took %v", r.dur)
	}
	mustNotSurvive(t, "timeout", m...)
	var got map[string]any
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatalf("--result file: %v", err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("--result is not JSON: %v\n%s", err, b)
	}
	if got["timed_out"] != true || got["exit_code"] != float64(124) {
		t.Errorf("--result after a timeout: want timed_out true and exit_code 124, got %s", b)
	}
}

// TestSignalsReachCommand: SIGTERM and SIGINT sent to agentrun reach the
// command, whose handler decides the exit status.
func TestSignalsReachCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{
		{syscall.SIGTERM, "TERM", 42},
		{syscall.SIGINT, "INT", 43},
		{syscall.SIGHUP, "HUP", 44},
		{syscall.SIGUSR1, "USR1", 45},
		{syscall.SIGUSR2, "USR2", 46},
		{syscall.SIGQUIT, "QUIT", 47},
		{syscall.SIGWINCH, "WINCH", 48},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := newWorkspace(t)
			script := fmt.Sprintf(`trap 'echo got-%s > /workspace/trapped; exit %d' %s
echo ready > /workspace/ready
while :; do sleep 0.1; done`, tc.name, tc.code, tc.name)
			run := startSpawn(t, spawnCfg{ws: ws, guard: 20 * time.Second}, "/bin/sh", "-c", script)
			waitForFile(t, filepath.Join(ws, "ready"), 10*time.Second)
			if err := syscall.Kill(run.pid(), tc.sig); err != nil {
				t.Fatal(err)
			}
			r := run.wait()
			mustExit(t, r, tc.code, "command trapping SIG"+tc.name)
			b, err := os.ReadFile(filepath.Join(ws, "trapped"))
			if err != nil || strings.TrimSpace(string(b)) != "got-"+tc.name {
				t.Errorf("the trap did not run: %q, %v\n%s", b, err, r)
			}
		})
	}
	// The sandbox's init started by the constructor from a cached plan
	// (a prestart hit) is released on another path: signals must reach
	// its command just the same.
	t.Run("TERM on a prestart hit", func(t *testing.T) {
		cfg := prestartCaller(t)
		cfg.ws = newWorkspace(t)
		res := filepath.Join(tempDir(t), "result.json")
		cfg.flags = []string{"--result", res}
		warmPrestart(t, cfg, res, "warming the cache")
		cfg.guard = 20 * time.Second
		run := startSpawn(t, cfg, "/bin/sh", "-c", `trap 'echo got-TERM > /workspace/trapped; exit 42' TERM
echo ready > /workspace/ready
while :; do sleep 0.1; done`)
		waitForFile(t, filepath.Join(cfg.ws, "ready"), 10*time.Second)
		if err := syscall.Kill(run.pid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r := run.wait()
		mustExit(t, r, 42, "command trapping SIGTERM")
		if got := readResult(t, res, r); got.Prestart != "hit" {
			if got.Limits == "cgroup-v2" {
				// The init is never adopted there (TestPrestart): this
				// was the ordinary C start, which TERM covers.
				t.Skipf("no prestart hit on cgroup v2 (prestart %q)", got.Prestart)
			}
			t.Errorf("prestart %q, want hit", got.Prestart)
		}
	})
	// After the command has ended, a signal must not cut agentrun's
	// clean-up short or replace the command's exit status: here agentrun
	// is held writing --result into a FIFO nobody reads yet.
	t.Run("TERM after the command ended", func(t *testing.T) {
		t.Parallel()
		dir := tempDir(t)
		fifo := filepath.Join(dir, "result")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		run := startSpawn(t, spawnCfg{ws: newWorkspace(t), flags: []string{"--result", fifo}, guard: 30 * time.Second}, "/bin/sh", "-c", "exit 3")
		waitBlockedInOpen(t, run.pid())
		if err := syscall.Kill(run.pid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(fifo)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		r := run.wait()
		mustExit(t, r, 3, "a SIGTERM after the command ended")
		if !strings.Contains(string(b), `"exit_code": 3`) {
			t.Errorf("--result: %q", b)
		}
	})
	t.Run("untrapped TERM kills with 143", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		run := startSpawn(t, spawnCfg{ws: ws, guard: 20 * time.Second}, "/bin/sh", "-c", "echo ready > /workspace/ready; exec sleep 60")
		waitForFile(t, filepath.Join(ws, "ready"), 10*time.Second)
		time.Sleep(100 * time.Millisecond) // let exec replace the shell
		if err := syscall.Kill(run.pid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		mustExit(t, run.wait(), 143, "sleep killed by a forwarded SIGTERM")
	})
}

// waitBlockedInOpen waits until a thread of pid sits in openat for ten
// polls in a row (opening a FIFO for writing blocks until a reader comes;
// the short opens of the clean-up do not last). A hang guard, not a
// timing assertion.
func waitBlockedInOpen(t *testing.T, pid int) {
	t.Helper()
	inOpen := func() bool {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
		for _, p := range tasks {
			if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), fmt.Sprintf("%d ", syscall.SYS_OPENAT)) {
				return true
			}
		}
		return false
	}
	for n, deadline := 0, time.Now().Add(20*time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n = n + 1; !inOpen() {
			n = 0
		}
		if n >= 10 {
			return
		}
	}
	t.Fatalf("hang guard: agentrun (pid %d) never blocked opening its --result FIFO", pid)
}

// TestInitHidesLongCommandLine: PID 1 of the sandbox (a copy of the CLI)
// shows "agentrun-init" in /proc/1/cmdline, never the caller's command
// line, also when that has more arguments than any fixed bound would
// allow for (the musl build finds the arguments by walking the initial
// stack). The sandbox reads it with the caller's arguments past 70,000.
func TestInitHidesLongCommandLine(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	marker := token("agentrun-argv-")
	args := []string{"/bin/sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; echo; echo "args=$#"`, "sh", marker}
	for i := 1; i < 70001; i++ {
		args = append(args, "x")
	}
	r := spawn(t, spawnCfg{ws: ws}, args...)
	mustExit(t, r, 0, "spawn with 70,001 arguments")
	if strings.Contains(r.stdout, marker) {
		t.Fatalf("/proc/1/cmdline in the sandbox shows the caller's command line:\n%.300s", r.stdout)
	}
	// Positive controls: the command got every argument, and PID 1 names
	// itself.
	if !strings.Contains(r.stdout, "args=70001") || !strings.Contains(r.stdout, "agentrun-init") {
		t.Errorf("want args=70001 and agentrun-init in the output:\n%.300s", r.stdout)
	}
}

// TestInitConfined: the sandbox's PID 1 holds no more than its command
// does. The C init builds the root in the host's network namespace while a
// second thread makes the sandbox's and loads the filter; by the time the
// command runs, PID 1 must have joined that namespace, hold the filter and
// no_new_privs, and (C init) be a single thread again. A PID 1 left outside
// would be a way out for anything that reaches it. Checked from inside,
// three times in one workspace: a first spawn and the prestarted (and,
// where it applies, express) ones after it. The network namespace is told
// by a listener of the test's in the host's: PID 1 must not see it.
func TestInitConfined(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := fmt.Sprintf(":%04X ", l.Addr().(*net.TCPAddr).Port)
	ws := newWorkspace(t)
	const script = `grep -E '^(Threads|NoNewPrivs|Seccomp):' /proc/1/status | tr -d ' \t' | tr '\n' ' '; echo; ` +
		`tail -n +3 /proc/1/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' '; echo; ` +
		`grep -E '^(Seccomp_filters|Speculation_Store_Bypass):' /proc/1/status | tr -d ' \t' | tr '\n' ' '; echo; ` +
		`grep -E '^(Seccomp_filters|Speculation_Store_Bypass):' /proc/self/status | tr -d ' \t' | tr '\n' ' '; echo; ` +
		`cat /proc/1/net/tcp`
	for i := 0; i < 3; i++ {
		r := sh(t, ws, nil, script)
		mustExit(t, r, 0, "reading PID 1's state")
		lines := strings.SplitN(r.stdout, "\n", 5)
		if len(lines) != 5 {
			t.Fatalf("unexpected output\n%s", r)
		}
		// The command's filters and mitigations are inherited from PID 1
		// at the fork: the same chain, unless PID 1 got a different one.
		if lines[2] != lines[3] {
			t.Errorf("spawn %d: PID 1 holds %q, the command %q", i+1, lines[2], lines[3])
		}
		for _, want := range []string{"NoNewPrivs:1", "Seccomp:2"} {
			if !strings.Contains(lines[0], want) {
				t.Errorf("spawn %d: PID 1 lacks %s: %q\n%s", i+1, want, lines[0], r)
			}
		}
		if !strings.Contains(lines[0], "Threads:1 ") {
			t.Errorf("spawn %d: the C init's PID 1 is not a single thread when the command runs: %q", i+1, lines[0])
		}
		if ifs := strings.Fields(lines[1]); len(ifs) != 1 || ifs[0] != "lo" {
			t.Errorf("SANDBOX ESCAPE: spawn %d: PID 1 sees the network interfaces %q, not the sandbox's lone lo", i+1, ifs)
		}
		if strings.Contains(lines[4], port) {
			t.Errorf("SANDBOX ESCAPE: spawn %d: PID 1 sees the host's listener on 127.0.0.1%s in /proc/1/net/tcp", i+1, port)
		}
	}
	t.Run("control: with --net host PID 1 sees the listener", func(t *testing.T) {
		r := sh(t, ws, []string{"--net", "host"}, script)
		mustExit(t, r, 0, "reading PID 1's state with --net host")
		if !strings.Contains(r.stdout, port) {
			t.Errorf("with --net host /proc/1/net/tcp should list the test's listener (port%s)\n%s", port, r)
		}
	})
}

// TestEarlyInitFailureReported: an init that fails before the parent's go
// (here its first step, the bounding set's drop, refused by its caller's
// filter) reports the step, and the CLI says so, rather than only that
// the go could not be sent to it. A first spawn and then spawns that find
// its cached plan.
func TestEarlyInitFailureReported(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the test's filter is written for amd64, not %s", runtime.GOARCH)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := spawnCfg{ws: newWorkspace(t), bin: self, env: []string{underFilterEnv + "=" + agentrunBin, underFilterDenyEnv + "=capbset-drop"}}
	for i := range 3 {
		r := spawn(t, cfg, "/bin/true")
		mustExit(t, r, 125, "a spawn whose init cannot drop the bounding set")
		if !strings.Contains(r.stderr, "bounding") || strings.Contains(r.stderr, "broken pipe") {
			t.Errorf("spawn %d: want the init's own report (the bounding set's drop), got:\n%s", i+1, r)
		}
	}
}

// TestUnderOuterFilter: agentrun started under a seccomp filter of its
// caller's (as inside a container) still confines PID 1 and the command.
// The C init then loads the released filter itself rather than handing it
// over from its second thread: TSYNC would not apply the filter's
// speculation mitigations to a thread that already runs under a filter.
// The chain then holds the caller's filter and the released one, without
// the hand-over's allow-all filter on top.
func TestUnderOuterFilter(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t)
	cfg := spawnCfg{ws: ws, bin: self, env: []string{underFilterEnv + "=" + agentrunBin}}
	for i := 0; i < 2; i++ { // a first spawn, and a prestarted one
		r := spawn(t, cfg, "/bin/sh", "-c", `grep -E '^(Seccomp|Seccomp_filters):' /proc/1/status | tr -d ' \t' | tr '\n' ' '; `+
			`grep -E '^(Seccomp|Seccomp_filters):' /proc/self/status | tr -d ' \t' | tr '\n' ' '; unshare -U true 2>/dev/null; echo unshare=$?`)
		mustExit(t, r, 0, "spawn under an outer filter")
		if strings.Count(r.stdout, "Seccomp:2") != 2 || !strings.Contains(r.stdout, "unshare=1") {
			t.Errorf("spawn %d: PID 1 and the command must run under the filter, and unshare -U must fail\n%s", i+1, r)
		}
		if strings.Count(r.stdout, "Seccomp_filters:2") != 2 {
			t.Errorf("spawn %d: want the caller's filter and the released one on PID 1 and the command (2), no hand-over\n%s", i+1, r)
		}
	}
}
