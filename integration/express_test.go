//go:build linux

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/cgroups"
	"golang.org/x/sys/unix"
)

// The express path (cmd/agentrun/internal/fastpath/express.c) runs a prestart hit
// without the Go runtime, from fingerprints of every host input of the
// cached plan. These tests run without t.Parallel: the express path stands
// aside while a killed runtime's cgroup record or express cgroup exists,
// and tests that look at agentrun's parent cgroup or the state records
// would see each other's.

const cgroupStateDir = "/run/agentrun/cgroups"

// expressCaller skips unless the express path can apply here: root on a
// host with a cgroup v1 pids hierarchy.
func expressCaller(t *testing.T) {
	t.Helper()
	needRoot(t)
	if !exists("/sys/fs/cgroup/pids/tasks") {
		t.Skip("the express path needs a cgroup v1 pids hierarchy at /sys/fs/cgroup/pids (prestart does not apply on cgroup v2)")
	}
}

// expressSpawn runs agentrun with a trace file and returns its result and
// what the express path said ("used", "off <why>", or "" for nothing).
func expressSpawn(t *testing.T, cfg spawnCfg, command ...string) (runResult, string) {
	t.Helper()
	dir := cfg.traceDir
	if dir == "" {
		dir = tempDir(t)
	}
	trace := filepath.Join(dir, "trace")
	_ = os.Remove(trace)
	cfg.env = append(cfg.env, "AGENTRUN_EXPRESS_TRACE="+trace)
	r := spawn(t, cfg, command...)
	b, _ := os.ReadFile(trace)
	return r, strings.TrimPrefix(strings.TrimSpace(string(b)), "express: ")
}

// warmExpress spawns until the express path runs: a miss caches the plan,
// a hit that Go adopts writes the express record, the third is express.
func warmExpress(t *testing.T, cfg spawnCfg) {
	t.Helper()
	var said []string
	for range 3 {
		r, s := expressSpawn(t, cfg, "/bin/true")
		mustExit(t, r, 0, "warm-up spawn")
		said = append(said, s)
	}
	if said[2] != "used" {
		t.Fatalf("the express path did not run on the third spawn with the same flags; it said %q", said)
	}
}

// TestExpress: a sandbox the express path runs is the one Go would run:
// the positive controls hold, its cgroup limits it and is removed, and
// signals reach the command.
func TestExpress(t *testing.T) {
	expressCaller(t)
	ws := newWorkspace(t)
	cfg := spawnCfg{ws: ws, flags: []string{"--pids", "24"}}
	warmExpress(t, cfg)

	t.Run("controls", func(t *testing.T) {
		expressStdioAndWrite(t, cfg)
		r, said := expressSpawn(t, cfg, "no-such-command-xyz")
		if said != "used" {
			t.Fatalf("express path not taken: %q", said)
		}
		mustExit(t, r, 127, "a missing command")
		if !strings.Contains(r.stderr, "no-such-command-xyz") {
			t.Errorf("a missing command is not named on stderr:\n%s", r)
		}
		r, _ = expressSpawn(t, cfg, "/bin/sh", "-c", "kill -KILL $$")
		mustExit(t, r, 128+int(syscall.SIGKILL), "a command killed by SIGKILL")
	})

	t.Run("cgroup limits the sandbox and goes away", func(t *testing.T) {
		// A fork bomb's start: more processes than --pids allows.
		r, said := expressSpawn(t, cfg, "/bin/sh", "-c", "for i in $(seq 40); do sleep 3 & done; wait")
		if said != "used" {
			t.Fatalf("express path not taken: %q", said)
		}
		if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "fork") {
			t.Errorf("SANDBOX ESCAPE: 40 processes started under --pids 24 on the express path:\n%s", r)
		}
		mustExit(t, func() runResult {
			r, _ := expressSpawn(t, cfg, "/bin/sh", "-c", "for i in $(seq 8); do sleep 0.1 & done; wait")
			return r
		}(), 0, "8 processes under --pids 24")

		trace := filepath.Join(tempDir(t), "trace")
		c := cfg
		c.env = []string{"AGENTRUN_EXPRESS_TRACE=" + trace}
		run := startSpawn(t, c, "/bin/sleep", "30")
		defer func() { _ = run.cmd.Process.Kill(); run.wait() }()
		cg := waitExpressCgroup(t)
		if cg.ownerPID != run.pid() {
			t.Errorf("cgroup %s names owner %d, want the CLI %d", cg.path, cg.ownerPID, run.pid())
		}
		// The constructor makes the cgroup first and writes the trace
		// right after.
		if b := waitContent(t, trace); strings.TrimSpace(b) != "express: used" {
			t.Fatalf("express path not taken: %q", b)
		}
		leaf := cg.path
		if b, err := os.ReadFile(filepath.Join(leaf, "pids.max")); err != nil || strings.TrimSpace(string(b)) != "24" {
			t.Errorf("pids.max of %s: %q %v, want 24", leaf, b, err)
		}
		// The init joins at its release and then starts sleep.
		var tasks []byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if tasks, _ = os.ReadFile(filepath.Join(leaf, "tasks")); len(strings.Fields(string(tasks))) >= 2 {
				break
			}
		}
		if n := len(strings.Fields(string(tasks))); n != 2 {
			t.Errorf("%s holds %d tasks (%q), want the init and sleep", leaf, n, tasks)
		}
		if strings.Contains(" "+strings.Join(strings.Fields(string(tasks)), " ")+" ", " "+strconv.Itoa(run.pid())+" ") {
			t.Errorf("the CLI itself is in the sandbox's cgroup")
		}
		_ = run.cmd.Process.Signal(syscall.SIGTERM)
		r = run.wait()
		mustExit(t, r, 128+int(syscall.SIGTERM), "SIGTERM forwarded to sleep")
		if exists(leaf) {
			t.Errorf("cgroup %s left behind", leaf)
		}
		if ents, _ := filepath.Glob(filepath.Join(cgroupStateDir, "*.json")); len(ents) > 0 {
			t.Errorf("state records left behind: %v", ents)
		}
		if exists(filepath.Dir(leaf)) {
			t.Errorf("agentrun's parent cgroup %s left behind", filepath.Dir(leaf))
		}
	})

	t.Run("signals reach the command", func(t *testing.T) {
		trace := filepath.Join(tempDir(t), "trace")
		c := cfg
		c.env = []string{"AGENTRUN_EXPRESS_TRACE=" + trace}
		run := startSpawn(t, c, "/bin/sh", "-c", "trap 'echo got-usr1; exit 3' USR1; echo ready > /workspace/sig-ready; while :; do sleep 0.05; done")
		waitFile(t, filepath.Join(ws, "sig-ready"))
		_ = run.cmd.Process.Signal(syscall.SIGUSR1)
		r := run.wait()
		mustExit(t, r, 3, "the command's USR1 trap")
		if !strings.Contains(r.stdout, "got-usr1") {
			t.Errorf("USR1 did not reach the command:\n%s", r)
		}
		if b, _ := os.ReadFile(trace); strings.TrimSpace(string(b)) != "express: used" {
			t.Errorf("express path not taken: %q", b)
		}
	})

	t.Run("next to a running sandbox", func(t *testing.T) {
		run := startSpawn(t, cfg, "/bin/sleep", "30")
		defer func() { _ = run.cmd.Process.Kill(); run.wait() }()
		waitExpressCgroup(t)
		r, said := expressSpawn(t, cfg, "/bin/true")
		mustExit(t, r, 0, "a spawn while another runs")
		if said != "used" {
			t.Errorf("a live sandbox's cgroup kept the express path off: %q", said)
		}
	})

	t.Run("kill -9 of the CLI is swept by the next spawn", func(t *testing.T) {
		run := startSpawn(t, cfg, "/bin/sleep", "30")
		cg := waitExpressCgroup(t)
		_ = run.cmd.Process.Kill()
		run.wait()
		// The init died with its parent; what it leaves is an empty
		// cgroup whose name says whose it was, and no state record.
		if !exists(cg.path) {
			t.Fatalf("the killed spawn's cgroup %s is gone before any sweep: the test shows nothing", cg.path)
		}
		if ents, _ := filepath.Glob(filepath.Join(cgroupStateDir, "*.json")); len(ents) > 0 {
			t.Errorf("an express spawn wrote state records: %v", ents)
		}
		r, said := expressSpawn(t, cfg, "/bin/true")
		mustExit(t, r, 0, "the spawn after a killed one")
		if said != "off cgroups to sweep" {
			t.Errorf("after a killed express spawn the next one said %q, want it left to Go's sweep", said)
		}
		if exists(cg.path) {
			t.Errorf("cgroup %s of the killed spawn not swept", cg.path)
		}
		if _, said = expressSpawn(t, cfg, "/bin/true"); said != "used" {
			t.Errorf("express path not back after the sweep: %q", said)
		}
	})

	t.Run("another user's cgroup is not this spawn's to judge", func(t *testing.T) {
		// An express cgroup whose owner is gone, but made by another user
		// (cgroupfs gives a cgroup its creator's uid): neither the express
		// path nor Go's sweep may judge it, as neither reads that user's
		// state records.
		dead := exec.Command("/bin/true")
		if err := dead.Run(); err != nil {
			t.Fatal(err)
		}
		leaf := filepath.Join(expressParent(t), fmt.Sprintf("sbe-%d-1-%d-0123456789abcdef", dead.Process.Pid, selfPidNS(t)))
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.Remove(leaf); _ = os.Remove(filepath.Dir(leaf)) }()
		if err := os.Lchown(leaf, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		r, said := expressSpawn(t, cfg, "/bin/true")
		mustExit(t, r, 0, "a spawn next to another user's cgroup")
		if said != "used" {
			t.Errorf("another user's cgroup kept the express path off: %q", said)
		}
		if !exists(leaf) {
			t.Errorf("another user's cgroup %s was removed", leaf)
		}
		// The same cgroup as root's is a killed runtime's: left to Go.
		if err := os.Lchown(leaf, 0, 0); err != nil {
			t.Fatal(err)
		}
		if _, said = expressSpawn(t, cfg, "/bin/true"); said != "off cgroups to sweep" {
			t.Errorf("a killed runtime's cgroup: the express path said %q, want it left to Go's sweep", said)
		}
		if exists(leaf) {
			t.Errorf("cgroup %s of a dead owner not swept", leaf)
		}
	})
}

// selfPidNS is the inode of this process's PID namespace.
func selfPidNS(t *testing.T) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// expressCgroup is a cgroup the express path made: its name,
// sbe-PID-START-PIDNS-RANDOM, is its only record.
type expressCgroup struct {
	path     string
	ownerPID int
}

// expressParent is agentrun's parent cgroup below this process's pids
// cgroup, where the express path makes its cgroups.
func expressParent(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "pids" {
			return filepath.Join("/sys/fs/cgroup/pids", f[2], "agentrun")
		}
	}
	t.Fatalf("no pids hierarchy in /proc/self/cgroup:\n%s", b)
	return ""
}

// waitExpressCgroup returns the one express cgroup once a sandbox made it.
func waitExpressCgroup(t *testing.T) expressCgroup {
	t.Helper()
	parent := expressParent(t)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ents, _ := filepath.Glob(filepath.Join(parent, "sbe-*"))
		if len(ents) == 1 {
			pid, _, _, ok := cgroups.ParseExpressName(filepath.Base(ents[0]))
			if !ok {
				t.Fatalf("express cgroup %s: malformed name", ents[0])
			}
			return expressCgroup{path: ents[0], ownerPID: pid}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no express cgroup appeared in %s", parent)
	return expressCgroup{}
}

// waitContent returns p's content once it is not empty.
func waitContent(t *testing.T, p string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(p)
		if len(b) > 0 || time.Now().After(deadline) {
			return string(b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !exists(p) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExpressStaleHostInputs: a host input of the cached plan that changed
// after the express record was written must send the spawn to Go, which
// compiles it afresh; the stale plan must not run.
func TestExpressStaleHostInputs(t *testing.T) {
	expressCaller(t)

	t.Run("bind source swapped for a symlink", func(t *testing.T) {
		ws := newWorkspace(t)
		_, secretFile, secret := hostSecret(t)
		src := filepath.Join(tempDir(t), "src")
		if err := os.Mkdir(src, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := spawnCfg{ws: ws, flags: []string{"--ro", src + ":/data"}}
		warmExpress(t, cfg)
		if err := os.Remove(src); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Dir(secretFile), src); err != nil {
			t.Fatal(err)
		}
		r, said := expressSpawn(t, cfg, "/bin/cat", "/data/secret.txt")
		if strings.Contains(r.stdout, secret) {
			t.Fatalf("SANDBOX ESCAPE: a stale plan bound the symlink's target:\n%s", r)
		}
		if said != "off "+src {
			t.Errorf("express path said %q, want it off at %s", said, src)
		}
		mustExit(t, r, 125, "a bind source that became a symlink")
	})

	t.Run("workspace swapped for a symlink", func(t *testing.T) {
		// With a record the constructor itself opens the
		// workspace for its idmapped tree and must fail there; the spawn
		// then ends as the Go path ends it.
		ws := newWorkspace(t)
		secretDir, _, secret := hostSecret(t)
		cfg := spawnCfg{ws: ws}
		warmExpress(t, cfg)
		if err := os.Rename(ws, ws+".gone"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeAll(t, ws+".gone") })
		if err := os.Symlink(secretDir, ws); err != nil {
			t.Fatal(err)
		}
		r, said := expressSpawn(t, cfg, "/bin/cat", "/workspace/secret.txt")
		if strings.Contains(r.stdout, secret) {
			t.Fatalf("SANDBOX ESCAPE: a stale plan bound the symlinked workspace:\n%s", r)
		}
		if said == "used" {
			t.Errorf("the express path ran on a workspace that became a symlink")
		}
		goCfg := cfg
		goCfg.env = []string{"AGENTRUN_EXPRESS=0"}
		g := spawn(t, goCfg, "/bin/cat", "/workspace/secret.txt")
		if g.code == 0 || r.code != g.code || r.stderr != g.stderr {
			t.Errorf("the spawn after a record differs from the Go path's, or succeeded:\nafter a record: %s\ngo: %s", r, g)
		}
	})

	t.Run("a setup failure after the release reads as on the Go path", func(t *testing.T) {
		// A file where a mount point inside the workspace goes: the init
		// fails after the release, which it then never reads.
		ws := newWorkspace(t)
		src := tempDir(t)
		cfg := spawnCfg{ws: ws, flags: []string{"--ro", src + ":/workspace/sub"}}
		warmExpress(t, cfg)
		if err := os.Remove(filepath.Join(ws, "sub")); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(ws, "sub"), "a file\n", 0o644)
		r, said := expressSpawn(t, cfg, "/bin/true")
		if said != "used" {
			t.Fatalf("express path not taken: %q", said)
		}
		goCfg := cfg
		goCfg.env = []string{"AGENTRUN_EXPRESS=0"}
		g := spawn(t, goCfg, "/bin/true")
		mustExit(t, g, 125, "the Go path with a file at the mount point")
		if r.code != g.code || r.stderr != g.stderr || !strings.Contains(r.stderr, "mount /workspace/sub") {
			t.Errorf("the express path's failure differs from the Go path's:\nexpress: %s\ngo: %s", r, g)
		}
	})

	t.Run("policy on a pipe", func(t *testing.T) {
		// The key holds the path of a policy it cannot hash, not its
		// content: each spawn must read the policy anew.
		ws := newWorkspace(t)
		pol := func(v string) spawnCfg {
			return spawnCfg{ws: ws, flags: []string{"--policy", "/dev/stdin"}, stdin: strings.NewReader(`{"env": ["MARK=` + v + `"]}`)}
		}
		for range 3 {
			r, said := expressSpawn(t, pol("a"), "/bin/true")
			mustExit(t, r, 0, "spawn with a piped policy")
			if said == "used" {
				t.Fatal("the express path ran with a policy it could not hash")
			}
		}
		r, said := expressSpawn(t, pol("b"), "/bin/sh", "-c", "echo $MARK")
		if said == "used" || strings.TrimSpace(r.stdout) != "b" {
			t.Errorf("a new piped policy did not take effect (express said %q):\n%s", said, r)
		}
		// The key (prestart.c) has the path and a marker for the content.
		img := imagePath(os.Geteuid(), os.Getegid(), "/run/agentrun", os.TempDir(),
			[]string{"--workspace", ws, "--policy", "policy:not-hashed", "/dev/stdin"}, nil)
		if !exists(img) {
			t.Fatalf("no plan image at %s: the test's key is not the constructor's", img)
		}
		if exists(img + ".express") {
			t.Errorf("an express record was written for a key without the policy's content: %s.express", img)
		}
	})

	t.Run("copied /etc file made private", func(t *testing.T) {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("no unshare(1) on this host")
		}
		target := copiedEtcFile(t)
		dir, file, secret := hostSecret(t)
		// Settled, so that the first spawns copy it into a root template
		// (mounts/template_linux.go), which must not outlive the change.
		time.Sleep(2100 * time.Millisecond)
		ws := newWorkspace(t)
		trace := filepath.Join(dir, "trace")
		// In a private mount namespace: the host's file replaced by ours,
		// world-readable while the plan is cached (so it is copied), then
		// made private before one more spawn with the same flags.
		script := `set -u; mount --bind "$1" "$2" || exit 90
for i in 1 2 3; do "$3" spawn --workspace "$4" -- /bin/true || exit 91; done
chmod 600 "$1"
echo ---
"$3" spawn --workspace "$4" -- /workspace/attacker read "$2"
echo "rc=$?"`
		cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", file, target, agentrunBin, ws)
		cmd.Env = append(os.Environ(), "AGENTRUN_EXPRESS_TRACE="+trace)
		cmd.Dir = os.TempDir()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if strings.Contains(string(out), secret) {
			t.Fatalf("SANDBOX ESCAPE: a stale plan copied the now-private %s into the sandbox:\n%s", target, out)
		}
		tr, _ := os.ReadFile(trace)
		lines := strings.Split(strings.TrimSpace(string(tr)), "\n")
		// The first spawn finds no plan and leaves no trace.
		if len(lines) != 3 || lines[1] != "express: used" || lines[2] != "express: off "+target {
			t.Errorf("express trace %q: want used on the third spawn, then off at %s", lines, target)
		}
		if _, after, _ := strings.Cut(string(out), "---\n"); !strings.HasPrefix(after, "BLOCKED open "+target) {
			t.Errorf("reading the private %s was not blocked:\n%s", target, out)
		}
	})
}

// TestExpressLeavesNoOrphans: an express spawn reaps everything it starts
// (the idmap holders, the init), so none is left to the
// host's reaper, which may never reap: an agent runner that is a
// container's PID 1 would collect a zombie per spawn. The test process
// becomes a child subreaper, which adopts any orphan of the spawns.
func TestExpressLeavesNoOrphans(t *testing.T) {
	expressCaller(t)
	becomeSubreaper(t)
	// Two idmapped binds as root: the workspace and --rw, two holders.
	cfg := spawnCfg{ws: newWorkspace(t), flags: []string{"--rw", tempDir(t) + ":/data"}}
	warmExpress(t, cfg)
	for i := range 8 {
		r, said := expressSpawn(t, cfg, "/bin/sh", "-c", "echo x > /workspace/f && echo y > /data/f")
		if said != "used" {
			t.Fatalf("spawn %d: express path not taken: %q", i, said)
		}
		mustExit(t, r, 0, "writes to both idmapped binds")
	}
	// A record whose fingerprint no longer holds (the workspace's mode):
	// the CLI started the init itself and left its holders for after the
	// release, and Go, which takes the init over, reaps them.
	fi, err := os.Stat(cfg.ws)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfg.ws, fi.Mode().Perm()^0o001); err != nil {
		t.Fatal(err)
	}
	r, said := expressSpawn(t, cfg, "/bin/sh", "-c", "echo x > /workspace/f && echo y > /data/f")
	if err := os.Chmod(cfg.ws, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
	mustExit(t, r, 0, "writes to both idmapped binds, Go taking over")
	if !strings.HasPrefix(said, "off "+cfg.ws) {
		t.Fatalf("with the workspace's mode changed the express path said %q, want it off at the workspace", said)
	}
	// The same through Go: a prestart hit that Go adopts, whose starter
	// is a forked child the CLI kills once it has reported.
	res := filepath.Join(tempDir(t), "result.json")
	goCfg := spawnCfg{ws: newWorkspace(t), flags: []string{"--rw", tempDir(t) + ":/data", "--result", res},
		env: []string{"AGENTRUN_EXPRESS=0"}}
	warmPrestart(t, goCfg, res, "warm-up")
	for i := range 8 {
		r := spawn(t, goCfg, "/bin/sh", "-c", "echo x > /workspace/f && echo y > /data/f")
		mustExit(t, r, 0, "writes to both idmapped binds, Go path")
		if got := readResult(t, res, r).Prestart; got != "hit" {
			t.Fatalf("spawn %d through Go: prestart %q, want hit", i, got)
		}
	}
	noOrphans(t)
}

// TestExpressStartFailsAfterClone: the constructor starts the init itself
// when an express record exists, and a failure after the init's clone (here
// the workspace's idmap, refused by the caller's filter) must leave nothing
// behind: the init killed and reaped, the idmap holder reaped, the cgroup
// removed. The spawn then goes to Go, which fails at the same step and says
// so; the record is kept, and the next spawn without the filter is express
// again.
func TestExpressStartFailsAfterClone(t *testing.T) {
	expressCaller(t)
	if runtime.GOARCH != "amd64" {
		t.Skipf("the test's filter is written for amd64, not %s", runtime.GOARCH)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	becomeSubreaper(t)
	cfg := spawnCfg{ws: newWorkspace(t)}
	warmExpress(t, cfg)
	failing := cfg
	failing.bin = self
	failing.env = []string{underFilterEnv + "=" + agentrunBin, underFilterDenyEnv + "=mount-setattr"}
	r, said := expressSpawn(t, failing, "/bin/true")
	mustExit(t, r, 125, "a spawn whose workspace cannot be idmapped")
	if said != "off init not started" {
		t.Errorf("the express path said %q, want it off because the init could not be started", said)
	}
	if !strings.Contains(r.stderr, "idmap") {
		t.Errorf("want Go's report of the idmapped mount, got:\n%s", r)
	}
	noOrphans(t)
	if ents, _ := filepath.Glob(filepath.Join(expressParent(t), "sbe-*")); len(ents) > 0 {
		t.Errorf("express cgroups left behind: %v", ents)
	}
	r, said = expressSpawn(t, cfg, "/bin/true")
	mustExit(t, r, 0, "the next spawn without the filter")
	if said != "used" {
		t.Errorf("the express path did not come back: %q", said)
	}
}

// becomeSubreaper makes the test process a child subreaper until the test
// ends, so that any orphan of the spawns is adopted by it (noOrphans).
func becomeSubreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become a child subreaper: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// noOrphans fails the test for every process the spawns left to it (see
// becomeSubreaper), and kills and reaps them.
func noOrphans(t *testing.T) {
	t.Helper()
	// An orphan may take a moment to reach its new parent: a hang guard,
	// not a timing assertion.
	var kids []int
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if kids = childrenOf(os.Getpid()); len(kids) > 0 {
			break
		}
	}
	for _, k := range kids {
		comm, state, _, _ := procStat(strconv.Itoa(k))
		t.Errorf("orphan adopted by the test: pid %d %q state %s", k, comm, state)
		_ = syscall.Kill(k, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(k, &ws, 0, nil)
	}
}

// expressStdioAndWrite is the positive control of an express spawn with
// cfg: its exit status, stdio and a workspace write.
func expressStdioAndWrite(t *testing.T, cfg spawnCfg) {
	t.Helper()
	r, said := expressSpawn(t, cfg, "/bin/sh", "-c", "echo out; echo err >&2; echo landed > /workspace/express-file; exit 7")
	if said != "used" {
		t.Fatalf("express path not taken: %q\n%s", said, r)
	}
	mustExit(t, r, 7, "exit 7 through the express path")
	if r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("stdio through the express path: stdout %q stderr %q, want \"out\\n\" and \"err\\n\"", r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.ws, "express-file")); err != nil || string(b) != "landed\n" {
		t.Errorf("workspace write did not land: %q %v", b, err)
	}
}

// TestExpressWithoutCgroup: a rootless caller on a v1 host may not write
// the pids hierarchy, so Go runs its sandboxes without a cgroup (limits
// "none"), and the express path then does the same. Whether a cgroup can
// be made is a host input like any other: once the caller's pids cgroup is
// delegated to it, Go gives the sandbox the default pids limit, and the
// express path must not go on without one.
func TestExpressWithoutCgroup(t *testing.T) {
	if !exists("/sys/fs/cgroup/pids/tasks") {
		t.Skip("needs a cgroup v1 pids hierarchy at /sys/fs/cgroup/pids (rootless callers on cgroup v2 get a delegated scope instead)")
	}
	// rootless returns the caller's configuration and ids: this user when
	// not root, else the unprivileged test user.
	rootless := func(t *testing.T) (spawnCfg, int, int) {
		t.Helper()
		if !isRoot() {
			return spawnCfg{}, os.Geteuid(), os.Getegid()
		}
		u := testUser(t)
		if u == nil {
			t.Skipf("no unprivileged test user ($%s)", envTestUser)
		}
		sys := credential(t, u)
		return spawnCfg{sys: sys}, int(sys.Credential.Uid), int(sys.Credential.Gid)
	}
	// setup gives a fresh rootless caller a workspace and runtime
	// directory, and checks that Go gives its sandbox no cgroup.
	setup := func(t *testing.T, cfg spawnCfg, uid, gid int) spawnCfg {
		t.Helper()
		cfg.ws = newWorkspace(t)
		chownTree(t, cfg.ws, uid, gid)
		cfg.env = append(cfg.env, "XDG_RUNTIME_DIR="+privateDir(t, uid, gid))
		cfg.traceDir = privateDir(t, uid, gid)
		res := filepath.Join(privateDir(t, uid, gid), "result.json")
		c := cfg
		c.flags = append(c.flags, "--result", res)
		r := spawn(t, c, "/bin/true")
		mustExit(t, r, 0, "a rootless spawn")
		if got := readResult(t, res, r); got.Limits != "none" {
			t.Skipf("this caller's sandboxes get a cgroup here (limits %q): nothing to check without one", got.Limits)
		}
		return cfg
	}

	t.Run("controls", func(t *testing.T) {
		cfg, uid, gid := rootless(t)
		cfg = setup(t, cfg, uid, gid)
		warmExpress(t, cfg)
		expressStdioAndWrite(t, cfg)
		if uid2, _ := fileOwner(t, filepath.Join(cfg.ws, "express-file")); uid2 != uid {
			t.Errorf("workspace write owned by host uid %d, want the caller's %d", uid2, uid)
		}
		// The isolation is the one Go builds: the host's processes and
		// network are out of sight.
		r, said := expressSpawn(t, cfg, "/bin/sh", "-c", "ls /proc | grep -c '^[0-9]'; cat /proc/net/dev | grep -c :")
		if said != "used" {
			t.Fatalf("express path not taken: %q", said)
		}
		mustExit(t, r, 0, "count processes and interfaces")
		if f := strings.Fields(r.stdout); len(f) != 2 || f[1] != "1" {
			t.Errorf("SANDBOX ESCAPE: the sandbox sees more than lo (interfaces, then processes):\n%s", r)
		} else if n, _ := strconv.Atoi(f[0]); n > 4 {
			t.Errorf("SANDBOX ESCAPE: the sandbox sees %d processes; its PID namespace holds only the init, sh and its children:\n%s", n, r)
		}
	})

	// The caller's own pids cgroup is made here, root's and out of the
	// caller's reach until the case delegates it: by owner (which lstat
	// sees) or through a supplementary group (which only the access check
	// sees; the key does not hold groups).
	const group = 4242
	for _, tc := range []struct {
		name     string
		prepare  func(cg string) error
		delegate func(t *testing.T, cg string, uid, gid int) (groups string)
	}{
		{"chowned to the caller", func(string) error { return nil },
			func(t *testing.T, cg string, uid, gid int) string {
				for _, p := range []string{cg, filepath.Join(cg, "tasks"), filepath.Join(cg, "cgroup.procs")} {
					if err := os.Chown(p, uid, gid); err != nil {
						t.Fatal(err)
					}
				}
				return "--clear-groups"
			}},
		{"writable through a supplementary group", func(cg string) error {
			if err := os.Chown(cg, 0, group); err != nil {
				return err
			}
			return os.Chmod(cg, 0o775)
		}, func(*testing.T, string, int, int) string { return fmt.Sprintf("--groups=%d", group) }},
	} {
		t.Run("stands aside once the pids cgroup is "+tc.name, func(t *testing.T) {
			if !isRoot() {
				t.Skip("needs root: makes a pids cgroup for the rootless caller and delegates it (the suite's root run covers this)")
			}
			if _, err := exec.LookPath("setpriv"); err != nil {
				t.Skip("needs setpriv(1) (util-linux) to start the rootless caller in a cgroup")
			}
			cfg, uid, gid := rootless(t)
			cg, err := os.MkdirTemp("/sys/fs/cgroup/pids", "agentrun-it-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { removeCgroup(t, cg) })
			if err := os.Chmod(cg, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tc.prepare(cg); err != nil {
				t.Fatal(err)
			}
			// wrapper starts agentrun as the caller, in cg, with groups.
			dir := tempDir(t)
			wrapper := func(groups string) string {
				w := filepath.Join(dir, "agentrun-in-cgroup"+groups)
				writeFile(t, w, fmt.Sprintf("#!/bin/sh\necho $$ > %s/cgroup.procs && exec setpriv --reuid=%d --regid=%d %s -- %s \"$@\"\n",
					cg, uid, gid, groups, agentrunBin), 0o755)
				return w
			}
			cfg.sys, cfg.bin = nil, wrapper("--clear-groups")
			cfg = setup(t, cfg, uid, gid)
			warmExpress(t, cfg)

			cfg.bin = wrapper(tc.delegate(t, cg, uid, gid))
			trace := filepath.Join(cfg.traceDir, "trace")
			_ = os.Remove(trace)
			c := cfg
			c.env = append(c.env, "AGENTRUN_EXPRESS_TRACE="+trace)
			run := startSpawn(t, c, "/bin/sleep", "30")
			// SIGTERM reaches sleep, and agentrun removes its cgroup.
			defer func() { _ = run.cmd.Process.Signal(syscall.SIGTERM); run.wait() }()
			said := strings.TrimSpace(waitContent(t, trace))
			if said != "express: off "+cg {
				t.Errorf("express path said %q, want it off at %s", said, cg)
			}
			// Go, which runs the spawn instead, now gives it a cgroup with
			// the default pids limit, below the caller's.
			var leaf string
			for deadline := time.Now().Add(10 * time.Second); leaf == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				for _, d := range subdirsDeepestFirst(cg) {
					if strings.HasPrefix(filepath.Base(d), "sbx-") {
						leaf = d
					}
				}
			}
			if leaf == "" {
				t.Fatalf("SANDBOX ESCAPE: with the pids cgroup delegated, the sandbox runs without a cgroup of its own under %s", cg)
			}
			if b, err := os.ReadFile(filepath.Join(leaf, "pids.max")); err != nil || strings.TrimSpace(string(b)) != "4096" {
				t.Errorf("pids.max of %s: %q %v, want the default 4096", leaf, b, err)
			}
		})
	}
}

// removeCgroup removes a v1 cgroup directory and those below it, waiting
// for tasks that are still exiting.
func removeCgroup(t *testing.T, cg string) {
	for _, d := range subdirsDeepestFirst(cg) {
		err := syscall.Rmdir(d)
		for deadline := time.Now().Add(5 * time.Second); err == syscall.EBUSY && time.Now().Before(deadline); err = syscall.Rmdir(d) {
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil && err != syscall.ENOENT {
			t.Errorf("cleanup: rmdir %s: %v", d, err)
		}
	}
}

// subdirsDeepestFirst lists dir and every directory below it, children
// first, so that rmdir can go down the list.
func subdirsDeepestFirst(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, subdirsDeepestFirst(filepath.Join(dir, e.Name()))...)
		}
	}
	return append(out, dir)
}

// bpfRelease is a release message (cinit.h) in the record's hex: no
// flags, then a filter that returns EPERM for the system calls nrs and
// allows every other, without an architecture check.
func bpfRelease(nrs ...uint32) string {
	le := func(v uint32) string {
		return fmt.Sprintf("%02x%02x%02x%02x", v&0xff, v>>8&0xff, v>>16&0xff, v>>24&0xff)
	}
	ins := func(code uint16, jt, jf uint8, k uint32) string {
		return fmt.Sprintf("%02x%02x%02x%02x", code&0xff, code>>8, jt, jf) + le(k)
	}
	h := le(0) + ins(0x20, 0, 0, 0) // A = the call's number
	for i, nr := range nrs {
		// Jump to the EPERM return past the remaining tests, else on.
		h += ins(0x15, uint8(len(nrs)-i), 0, nr)
	}
	return h + ins(0x06, 0, 0, 0x7fff0000) + ins(0x06, 0, 0, 0x00050000|1)
}

// tamperRecord replaces the release of the express record for a spawn
// with cfg's workspace and no flags, and with breakC also its C
// fingerprint, so that the express path stands aside and Go adopts the
// prestarted init.
func tamperRecord(t *testing.T, ws, release string, breakC bool) {
	t.Helper()
	rec := imagePath(os.Geteuid(), os.Getegid(), "/run/agentrun", os.TempDir(), []string{"--workspace", ws}, nil) + ".express"
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatalf("no express record where the test expects it: %v", err)
	}
	lines := strings.Split(string(b), "\n")
	n := 0
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "release "):
			lines[i] = "release " + release
			n++
		case breakC && strings.HasPrefix(l, "C\t"):
			lines[i] = "C\t0000000000000000"
			n++
		}
	}
	if want := map[bool]int{false: 1, true: 2}[breakC]; n != want {
		t.Fatalf("record %s: replaced %d lines, want %d:\n%s", rec, n, want, b)
	}
	if err := os.WriteFile(rec, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tamperedSpawn warms the express path for a fresh workspace, replaces
// the record's release (tamperRecord) and runs command, which the express
// path must take (want "used") or stand aside from as want says.
func tamperedSpawn(t *testing.T, release string, breakC bool, want string, command ...string) (runResult, spawnCfg) {
	t.Helper()
	ws := newWorkspace(t)
	cfg := spawnCfg{ws: ws}
	warmExpress(t, cfg)
	tamperRecord(t, ws, release, breakC)
	r, said := expressSpawn(t, cfg, command...)
	if said != want {
		t.Fatalf("the express path said %q, want %q", said, want)
	}
	return r, cfg
}

// TestExpressEarlyFilter: with an express record the init's loader thread
// loads the record's filter before the parent has checked anything, and
// hands it over only if the release that comes is that filter, byte for
// byte (cinit.c, loader_preload). A filter under which the loader could
// not receive the release is not loaded early, and a release that differs
// (Go adopted the init after the express path stood aside) is loaded by
// init itself, never the early one. The records are changed by hand:
// Go writes records only for its default profile.
func TestExpressEarlyFilter(t *testing.T) {
	expressCaller(t)

	t.Run("filter denying the loader's receive calls", func(t *testing.T) {
		r, _ := tamperedSpawn(t, bpfRelease(unix.SYS_RECVFROM, unix.SYS_RECVMSG), false, "used",
			"/bin/sh", "-c", "grep '^Seccomp' /proc/self/status; exit 7")
		mustExit(t, r, 7, "a command under a filter that denies recvmsg and recvfrom")
		if !strings.Contains(r.stdout, "Seccomp:\t2") {
			t.Errorf("the command runs without the release's filter:\n%s", r)
		}
	})

	t.Run("release other than the record's", func(t *testing.T) {
		// Preloaded: a filter that denies uname. Sent: the one Go compiled,
		// once the express path stood aside at the C fingerprint.
		r, cfg := tamperedSpawn(t, bpfRelease(unix.SYS_UNAME), true, "off /proc/self/cgroup",
			"/bin/sh", "-c", "uname >/dev/null && echo uname-ok; grep '^Seccomp' /proc/self/status")
		mustExit(t, r, 0, "the spawn Go ran after the express path stood aside")
		if !strings.Contains(r.stdout, "uname-ok") {
			t.Errorf("SECCOMP: the command runs under the preloaded filter, not the release's:\n%s", r)
		}
		if !strings.Contains(r.stdout, "Seccomp:\t2") || !strings.Contains(r.stdout, "Seccomp_filters:\t1") {
			t.Errorf("want the release's filter alone, loaded by init:\n%s", r)
		}
		r = spawn(t, cfg, "/bin/sh", "-c", "unshare -U true 2>/dev/null; echo rc=$?")
		if !strings.Contains(r.stdout, "rc=1") {
			t.Errorf("the default profile does not hold after the adoption:\n%s", r)
		}
	})

	t.Run("record filter the kernel refuses", func(t *testing.T) {
		// An opcode the kernel rejects, after the last return: the
		// loader's check passes it, the load fails. Go's release, sent
		// after the express path stood aside, must still run.
		r, _ := tamperedSpawn(t, bpfRelease(unix.SYS_UNAME)+"ffff000000000000", true, "off /proc/self/cgroup",
			"/bin/sh", "-c", "grep '^Seccomp:' /proc/self/status; exit 3")
		mustExit(t, r, 3, "the spawn Go ran after a preload that failed")
		if !strings.Contains(r.stdout, "Seccomp:\t2") {
			t.Errorf("the command runs without the release's filter:\n%s", r)
		}
	})
}
