//go:build linux

package spawn

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/bench/internal/report"
	"github.com/agentrun/agentrun/bench/internal/sched"
)

func TestBwrapArgs(t *testing.T) {
	all := func(string) bool { return true }
	args := BwrapArgs("/tmp/ws", all)
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"--unshare-all", "--new-session", "--die-with-parent", "--clearenv --setenv PATH",
		"--ro-bind /usr /usr", "--symlink usr/bin /bin", "--symlink usr/lib /lib",
		"--symlink usr/lib64 /lib64", "--symlink usr/sbin /sbin",
		"--ro-bind /etc/passwd /etc/passwd", "--ro-bind /etc/ld.so.cache /etc/ld.so.cache",
		"--proc /proc", "--dev /dev", "--tmpfs /tmp", "--bind /tmp/ws /workspace", "--chdir /workspace",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("bwrap args lack %q: %s", want, joined)
		}
	}
	if args[len(args)-1] != "/bin/true" {
		t.Errorf("command is not last: %s", joined)
	}

	// A host without /usr/lib64 or /etc/resolv.conf gets neither.
	some := func(p string) bool { return p != "/usr/lib64" && p != "/etc/resolv.conf" }
	joined = strings.Join(BwrapArgs("/w", some), " ")
	if strings.Contains(joined, "lib64") || strings.Contains(joined, "resolv.conf") {
		t.Errorf("absent paths still bound: %s", joined)
	}
}

const specJSON = `{
	"process": {"terminal": true, "args": ["sh"], "rlimits": [
		{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
		{"type": "RLIMIT_NPROC", "hard": 18446744073709551615, "soft": 100},
		{"type": "RLIMIT_BOGUS", "hard": 1, "soft": 1}]},
	"root": {"path": "rootfs", "readonly": false},
	"linux": {"uidMappings": [{"containerID": 0, "hostID": 0, "size": 1}],
	          "gidMappings": [{"containerID": 0, "hostID": 0, "size": 1}]}
}`

func TestRuncEditApply(t *testing.T) {
	uid, gid := 65534, 65533
	e := RuncEdit{
		Args:        []string{"/bin/true"},
		CgroupsPath: "/agentrun-bench/runc-1",
		MapUID:      &uid, MapGID: &gid,
		CurrentHard: func(name string) (uint64, bool) {
			if name == "RLIMIT_BOGUS" {
				return 0, false
			}
			return 20000, true
		},
	}
	out, dropped, err := e.Apply([]byte(specJSON))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Process struct {
			Terminal bool              `json:"terminal"`
			Args     []string          `json:"args"`
			Rlimits  []json.RawMessage `json:"rlimits"`
		} `json:"process"`
		Root  struct{ Readonly bool } `json:"root"`
		Linux struct {
			CgroupsPath string                    `json:"cgroupsPath"`
			UIDMappings []struct{ HostID uint32 } `json:"uidMappings"`
			GIDMappings []struct{ HostID uint32 } `json:"gidMappings"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("edited config is not JSON: %v", err)
	}
	if cfg.Process.Terminal || !slices.Equal(cfg.Process.Args, []string{"/bin/true"}) || !cfg.Root.Readonly {
		t.Errorf("process/root not edited: %s", out)
	}
	if len(cfg.Process.Rlimits) != 1 || !strings.Contains(string(cfg.Process.Rlimits[0]), "RLIMIT_NOFILE") {
		t.Errorf("kept rlimits %s, want only NOFILE", cfg.Process.Rlimits)
	}
	if len(dropped) != 2 || !strings.Contains(dropped[0], "RLIMIT_NPROC") || !strings.Contains(dropped[1], "RLIMIT_BOGUS") {
		t.Errorf("dropped = %q", dropped)
	}
	// The 2^64-1 rlimit must survive parsing without float rounding errors.
	if !strings.Contains(string(out), "RLIMIT_NOFILE") || strings.Contains(string(out), "e+19") {
		t.Errorf("numbers mangled: %s", out)
	}
	if cfg.Linux.CgroupsPath != "/agentrun-bench/runc-1" || cfg.Linux.UIDMappings[0].HostID != 65534 || cfg.Linux.GIDMappings[0].HostID != 65533 {
		t.Errorf("linux section not edited: %+v", cfg.Linux)
	}

	if _, _, err := (RuncEdit{}).Apply([]byte(`{"root": {}}`)); err == nil {
		t.Error("config without process accepted")
	}
	if _, _, err := (RuncEdit{}).Apply([]byte(`not json`)); err == nil {
		t.Error("invalid JSON accepted")
	}
}

func TestRlimitNumber(t *testing.T) {
	for name, want := range map[string]int{"RLIMIT_CPU": 0, "RLIMIT_NPROC": 6, "RLIMIT_NOFILE": 7, "RLIMIT_RTTIME": 15} {
		if got, ok := rlimitNumber(name); !ok || got != want {
			t.Errorf("%s = %d, %v; want %d", name, got, ok, want)
		}
	}
	if _, ok := rlimitNumber("RLIMIT_BOGUS"); ok {
		t.Error("unknown rlimit accepted")
	}
	if hard, ok := currentHardLimit("RLIMIT_NOFILE"); !ok || hard == 0 {
		t.Errorf("RLIMIT_NOFILE hard limit: %d, %v", hard, ok)
	}
}

func TestParseTimeRSS(t *testing.T) {
	for in, want := range map[string]int64{"916\n": 916, "Command exited with non-zero status 1\n5708\n": 5708} {
		got, err := ParseTimeRSS(in)
		if err != nil || got != want {
			t.Errorf("ParseTimeRSS(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := ParseTimeRSS("garbage"); err == nil {
		t.Error("garbage accepted")
	}
}

func TestValidateOnly(t *testing.T) {
	if err := ValidateOnly([]string{Bwrap, AgentrunNone}); err != nil {
		t.Error(err)
	}
	if err := ValidateOnly([]string{"docker"}); err == nil || !strings.Contains(err.Error(), "known:") {
		t.Errorf("unknown name: err = %v", err)
	}
}

func TestAgentrunMissingIsReported(t *testing.T) {
	c := agentrunCLI(AgentrunNone, "/nonexistent/agentrun", "none")
	if c.Status != report.StatusMissing || !strings.Contains(c.Reason, "make build") {
		t.Errorf("status %q reason %q", c.Status, c.Reason)
	}
	dir := t.TempDir()
	c = agentrunCLI(AgentrunNone, dir, "none")
	if c.Status != report.StatusFailed {
		t.Errorf("directory as binary: status %q", c.Status)
	}
}

// TestInProcessAgentrun runs the library contender once for real.
func TestInProcessAgentrun(t *testing.T) {
	api := inProcessAgentrun(t.TempDir())
	if !api.Runnable() || api.inProc == nil {
		t.Fatalf("in-process contender not runnable: %+v", api)
	}
	if err := api.inProc(context.Background()); err != nil {
		t.Fatalf("agentrun.Run of /bin/true: %v", err)
	}
}

// TestWarmupAndInterleavedRun drives the runner with /bin/true and
// /bin/false: the failing one must be marked failed by its warm-up and keep
// its reason, the other must get one sample per round. Nothing is timed.
func TestWarmupAndInterleavedRun(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	mk := func(name, bin string) *Contender {
		c := fixedArgv(&Contender{Name: name, Label: name, Status: report.StatusOK}, bin)
		c.Dir = t.TempDir()
		return c
	}
	missing := &Contender{Name: "gone", Status: report.StatusMissing, Reason: "not installed"}
	cs := []*Contender{mk("ok", "/bin/true"), mk("bad", "/bin/false"), missing}
	r := &Runner{Null: null, Timeout: time.Minute}
	ctx := context.Background()
	if err := r.Warmup(ctx, cs, 1); err != nil {
		t.Fatal(err)
	}
	if cs[1].Status != report.StatusFailed || !strings.Contains(cs[1].Reason, "exit status 1") {
		t.Errorf("failing contender: %q %q", cs[1].Status, cs[1].Reason)
	}
	res, err := r.Latency(ctx, cs, 5, sched.NewRand(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("got %d results, want 3 (none dropped)", len(res))
	}
	if res[0].Summary == nil || res[0].Summary.N != 5 || len(res[0].SamplesMS) != 5 {
		t.Errorf("ok contender: %+v", res[0])
	}
	if res[1].Summary != nil || res[1].Status != report.StatusFailed {
		t.Errorf("failed contender was measured: %+v", res[1])
	}
	if res[2].Status != report.StatusMissing || res[2].Reason != "not installed" {
		t.Errorf("missing contender: %+v", res[2])
	}

	points, err := r.Scale(ctx, cs[:1], []int{1, 3}, 6, 2, sched.NewRand(2))
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 || points[0].Spawns != 6 || points[1].Spawns != 12 || points[1].Latency == nil {
		t.Errorf("scale points: %+v", points)
	}
}

// TestBaselineContenders checks the contenders of -baseline: they run the
// baseline binary with agentrun-none's and agentrun-rootless's recipe, each
// in a workspace (and runtime directory) of its own, so that the two builds
// do not share a prestart cache key.
func TestBaselineContenders(t *testing.T) {
	dir := t.TempDir()
	cur, base := dir+"/agentrun", dir+"/agentrun-base"
	for _, p := range []string{cur, base} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n# "+p+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	only := []string{AgentrunNone, AgentrunNoneBase, AgentrunRootless, AgentrunRootlessBase}
	set, err := Build(context.Background(), Options{Agentrun: cur, Baseline: base, Only: only})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	byName := map[string]*Contender{}
	var names []string
	for _, c := range set.Contenders {
		byName[c.Name] = c
		names = append(names, c.Name)
	}
	if !slices.Equal(names, only) {
		t.Fatalf("contenders %q, want %q", names, only)
	}
	for _, pair := range [][2]string{{AgentrunNone, AgentrunNoneBase}, {AgentrunRootless, AgentrunRootlessBase}} {
		c, b := byName[pair[0]], byName[pair[1]]
		if !c.Runnable() || !b.Runnable() {
			t.Fatalf("%s: %s %s, %s: %s %s", c.Name, c.Status, c.Reason, b.Name, b.Status, b.Reason)
		}
		cArgv, bArgv := c.argv(1), b.argv(1)
		if !slices.Equal(cArgv[1:], bArgv[1:]) {
			t.Errorf("%s runs %q, %s %q: not the same recipe", c.Name, cArgv, b.Name, bArgv)
		}
		got, err := os.ReadFile(bArgv[0])
		if err != nil || !strings.Contains(string(got), base) {
			t.Errorf("%s runs %s (%q, %v), not the baseline build", b.Name, bArgv[0], got, err)
		}
		if c.Dir == b.Dir {
			t.Errorf("%s and %s share the workspace %s", c.Name, b.Name, c.Dir)
		}
		if (c.Cred == nil) != (b.Cred == nil) || c.Cred != nil && c.Cred.Uid != b.Cred.Uid {
			t.Errorf("%s and %s run as different users: %+v, %+v", c.Name, b.Name, c.Cred, b.Cred)
		}
	}
	if xdg := envValue(byName[AgentrunRootlessBase].Env, "XDG_RUNTIME_DIR"); xdg == envValue(byName[AgentrunRootless].Env, "XDG_RUNTIME_DIR") {
		t.Errorf("the rootless contenders share the runtime directory %s", xdg)
	}

	// Without a baseline they are left out, and asking for them is an error.
	set2, err := Build(context.Background(), Options{Agentrun: cur, Only: []string{AgentrunNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer set2.Close()
	if len(set2.Contenders) != 1 || set2.Contenders[0].Name != AgentrunNone {
		t.Errorf("without -baseline: %d contenders", len(set2.Contenders))
	}
	if _, err := Build(context.Background(), Options{Agentrun: cur, Only: []string{AgentrunNoneBase}}); err == nil {
		t.Error("a baseline contender without a baseline build was accepted")
	}
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
