//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
// host) that name a sandbox cgroup; while the sandbox still runs, it
// passes them to during, when set.
func sandboxHierarchies(t *testing.T, flags []string, during func([]string)) []string {
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
	if during != nil {
		during(in)
	}
	return in
}

// childOf returns the one child of pid (the sandbox's init).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	kids := childrenOf(pid)
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
	lean := sandboxHierarchies(t, nil, nil)
	if len(lean) != 1 || !strings.Contains(strings.SplitN(lean[0], ":", 3)[1], "pids") {
		t.Errorf("without --result the sandbox is in %v, want the pids hierarchy alone", lean)
	}
	res := filepath.Join(tempDir(t), "result.json")
	full := sandboxHierarchies(t, []string{"--result", res}, nil)
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

// TestDefaultPidsNextToOtherLimits checks that --cpus or --memory without
// --pids keeps the default pids limit, which must not depend on whether
// other limits are set, with and without --result.
func TestDefaultPidsNextToOtherLimits(t *testing.T) {
	needV1Root(t)
	res := filepath.Join(tempDir(t), "result.json")
	for _, flags := range [][]string{
		{"--cpus", "1"},
		{"--memory", "256M"},
		{"--cpus", "1", "--result", res},
	} {
		var pidsMax string
		sandboxHierarchies(t, flags, func(lines []string) {
			for _, line := range lines {
				f := strings.SplitN(line, ":", 3)
				if len(f) == 3 && strings.Contains(","+f[1]+",", ",pids,") {
					b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", f[2], "pids.max"))
					if err != nil {
						t.Fatal(err)
					}
					pidsMax = strings.TrimSpace(string(b))
				}
			}
		})
		if pidsMax != "4096" {
			t.Errorf("SANDBOX LIMIT: %v: pids.max %q, want the default 4096 (empty: in no pids cgroup)", flags, pidsMax)
		}
	}
}

// TestOOMKeepsCommandStatus: a process of the sandbox killed by the OOM
// killer does not replace the command's own exit status, which the spawn
// contract promises; the message says what was killed.
func TestOOMKeepsCommandStatus(t *testing.T) {
	if !isRoot() {
		t.Skip("needs root: --memory needs a cgroup, which rootless v1 callers cannot get")
	}
	ws := newWorkspace(t)
	for _, extra := range [][]string{nil, {"--result", filepath.Join(tempDir(t), "result.json")}} {
		flags := append([]string{"--memory", "64M"}, extra...)
		r := spawn(t, spawnCfg{ws: ws, flags: flags}, "/bin/sh", "-c", "/workspace/attacker alloc 512; exit 3")
		if r.code != 3 || !strings.Contains(r.stderr, "a process in the sandbox was killed") {
			t.Errorf("%v: want the command's exit 3 and a note that a process was OOM-killed\n%s", flags, r)
		}
		// A timeout kill is the timeout's, even when the OOM killer took
		// a process before.
		r = spawn(t, spawnCfg{ws: ws, flags: append([]string{"--timeout", "1s"}, flags...)}, "/bin/sh", "-c", "/workspace/attacker alloc 512; sleep 30")
		if r.code != 124 || strings.Contains(r.stderr, "the command was killed") || !strings.Contains(r.stderr, "a process in the sandbox was killed") {
			t.Errorf("%v --timeout 1s: want exit 124, and the OOM line naming a process, not the command\n%s", flags, r)
		}
		// The control: the command itself killed is 137, as any SIGKILL.
		r = spawn(t, spawnCfg{ws: ws, flags: flags}, "/workspace/attacker", "alloc", "512")
		if r.code != 137 || !strings.Contains(r.stderr, "memory limit of 67108864 bytes hit; the command was killed") {
			t.Errorf("%v: want exit 137 and the memory-limit message\n%s", flags, r)
		}
	}
}

// TestDefaultPidsStopsBomb: the attack behind TestDefaultPidsNextToOtherLimits.
// With --cpus and no --pids, a fork bomb stops at the default 4096, with
// and without --result; pids_peak shows it was that limit that stopped it.
func TestDefaultPidsStopsBomb(t *testing.T) {
	needV1Root(t)
	bomb := `i=0; while [ $i -lt 4200 ]; do sleep 30 & i=$((i+1)); done; echo forked $i`
	res := filepath.Join(tempDir(t), "result.json")
	for _, flags := range [][]string{{"--cpus", "1"}, {"--cpus", "1", "--result", res}} {
		r := spawn(t, spawnCfg{ws: tempDir(t), flags: flags}, "/bin/sh", "-c", bomb)
		if strings.Contains(r.stdout, "forked 4200") || !strings.Contains(r.stderr, "fork") {
			t.Errorf("SANDBOX LIMIT: %v: a fork bomb got past the default pids limit\n%s", flags, r)
		}
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		PidsPeak uint64 `json:"pids_peak"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.PidsPeak < 4000 || got.PidsPeak > 4096 {
		t.Errorf("pids_peak %d: want the bomb stopped at the default limit of 4096", got.PidsPeak)
	}
}
