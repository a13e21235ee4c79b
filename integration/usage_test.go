package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needV1Root skips unless this is root on a host whose limits are v1
// cgroups, the only place where a sandbox spans several hierarchies.
func needV1Root(t *testing.T) {
	t.Helper()
	if !isRoot() {
		t.Skip("needs root: v1 cgroups are root's only (the rootless v1 spawn runs without a cgroup)")
	}
	if exists("/sys/fs/cgroup/cgroup.controllers") {
		t.Skip("cgroup v2 host: one hierarchy, nothing to leave out (this test is for v1 and hybrid hosts)")
	}
}

// sandboxHierarchies starts a spawn with flags, waits until its command
// runs and returns the lines of the init's /proc/PID/cgroup (read from the
// host) that name a sandbox cgroup.
func sandboxHierarchies(t *testing.T, flags []string) []string {
	t.Helper()
	ws := tempDir(t)
	r := startSpawn(t, spawnCfg{ws: ws, flags: flags}, "/bin/sh", "-c", "touch /workspace/up; exec sleep 30")
	defer func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM) // forwarded: sleep ends
		r.wait()
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !exists(filepath.Join(ws, "up")) {
		if time.Now().After(deadline) {
			t.Fatalf("the command did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	init := childOf(t, r.pid())
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", init))
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(line, "/sbx-") {
			in = append(in, line)
		}
	}
	return in
}

// childOf returns the one child of pid (the sandbox's init).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				kids = append(kids, n)
			}
		}
	}
	if len(kids) != 1 {
		t.Fatalf("agentrun %d has children %v, want the init alone", pid, kids)
	}
	return kids[0]
}

// TestUsageHierarchies: a CLI spawn without --result reads no usage, so on
// v1 its sandbox joins only the hierarchy that enforces its (pids) limit;
// with --result it joins every usable one, and the usage is reported.
func TestUsageHierarchies(t *testing.T) {
	needV1Root(t)
	lean := sandboxHierarchies(t, nil)
	if len(lean) != 1 || !strings.Contains(strings.SplitN(lean[0], ":", 3)[1], "pids") {
		t.Errorf("without --result the sandbox is in %v, want the pids hierarchy alone", lean)
	}
	res := filepath.Join(tempDir(t), "result.json")
	full := sandboxHierarchies(t, []string{"--result", res})
	if len(full) < 2 {
		t.Errorf("with --result the sandbox is in %v, want every usable hierarchy (cpuacct for the usage)", full)
	}
	// The positive control for the usage: --result still reports it.
	r := spawn(t, spawnCfg{ws: tempDir(t), flags: []string{"--result", res}}, "/bin/sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	b, err := os.ReadFile(res)
	if err != nil || r.code != 0 {
		t.Fatalf("--result: %v\n%s", err, r)
	}
	if !strings.Contains(string(b), `"cpu_usage_us"`) || !strings.Contains(string(b), `"pids_peak"`) {
		t.Errorf("--result lacks the usage figures:\n%s", b)
	}
}

// TestLimitsHoldWithoutResult: joining fewer hierarchies must not loosen a
// limit: a fork bomb stops at --pids without --result. The control shows
// the same script forking all 64 under a limit that allows them.
func TestLimitsHoldWithoutResult(t *testing.T) {
	needV1Root(t)
	bomb := `i=0; while [ $i -lt 64 ]; do sleep 5 & i=$((i+1)); done; echo forked $i`
	r := spawn(t, spawnCfg{ws: tempDir(t), flags: []string{"--pids", "16"}}, "/bin/sh", "-c", bomb)
	if strings.Contains(r.stdout, "forked 64") || !strings.Contains(r.stderr, "fork") {
		t.Errorf("SANDBOX LIMIT: a fork bomb without --result got past --pids 16\n%s", r)
	}
	r = spawn(t, spawnCfg{ws: tempDir(t), flags: []string{"--pids", "128"}}, "/bin/sh", "-c", bomb+"; kill $(jobs -p) 2>/dev/null; true")
	if !strings.Contains(r.stdout, "forked 64") {
		t.Errorf("control: the bomb script did not fork 64 under --pids 128\n%s", r)
	}
}
