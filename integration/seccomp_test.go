//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// result is the --result JSON.
type result struct {
	ExitCode     int      `json:"exit_code"`
	Seccomp      string   `json:"seccomp"`
	Capabilities []string `json:"capabilities"`
	Violations   []struct {
		Kind, Name, Detail, Suggestion string
	} `json:"violations"`
}

func spawnWithResult(t *testing.T, ws string, flags []string, command ...string) (runResult, result) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "result.json")
	r := spawn(t, spawnCfg{ws: ws, flags: append([]string{"--result", out}, flags...)}, command...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no result file: %v\n%s", err, r)
	}
	var res result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("result JSON: %v\n%s", err, b)
	}
	return r, res
}

// TestViolationReports: a denied call becomes exactly one violation entry
// naming the call, its salient argument and a policy change.
func TestViolationReports(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, detail string
		sub          []string
	}{
		{"keyctl", "", []string{"keyctl-find", "x"}},
		{"unshare", "flags=CLONE_NEWUSER", []string{"/usr/bin/unshare", "-U", "true"}},
		{"fchmodat", "mode=04755", []string{"/bin/sh", "-c", "touch f && chmod 4755 f"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ws := newWorkspace(t)
			cmd := c.sub
			if !strings.HasPrefix(cmd[0], "/") {
				cmd = append([]string{"/workspace/attacker"}, cmd...)
			}
			r, res := spawnWithResult(t, ws, []string{"--verbose"}, cmd...)
			var hits int
			for _, v := range res.Violations {
				if v.Kind == "syscall" && v.Name == c.name {
					hits++
					if c.detail != "" && v.Detail != c.detail {
						t.Errorf("detail %q, want %q", v.Detail, c.detail)
					}
					if v.Suggestion == "" {
						t.Errorf("violation without a suggestion: %+v", v)
					}
				}
			}
			if hits != 1 {
				t.Fatalf("want one %s violation, got %+v\n%s", c.name, res.Violations, r)
			}
			if !strings.Contains(r.stderr, "agentrun: denied "+c.name) {
				t.Errorf("--verbose must print the denial on stderr\n%s", r)
			}
			if res.Seccomp != "default" {
				t.Errorf("result seccomp %q, want default", res.Seccomp)
			}
		})
	}
	// Without --verbose or --result nothing reads the reports, and the
	// filter denies by itself (no listener; TestSkipViolations checks
	// that part): the same calls still fail.
	t.Run("still denied without --verbose or --result", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		r := spawn(t, spawnCfg{ws: ws}, "/bin/sh", "-c",
			"echo ok > ok; /usr/bin/unshare -U true; echo unshare=$?; touch f && chmod 4755 f; echo chmod=$?")
		if r.code != 0 || !strings.Contains(r.stdout, "unshare=1") || !strings.Contains(r.stdout, "chmod=1") {
			t.Fatalf("unshare -U and chmod 4755 must fail\n%s", r)
		}
		if strings.Count(r.stderr, "Operation not permitted") != 2 || strings.Contains(r.stderr, "agentrun:") {
			t.Fatalf("want two EPERMs and no report from agentrun\n%s", r)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "ok")); err != nil || string(b) != "ok\n" {
			t.Fatalf("positive control: workspace write %q %v", b, err)
		}
		if fi, err := os.Stat(filepath.Join(ws, "f")); err != nil || fi.Mode()&os.ModeSetuid != 0 {
			t.Fatalf("the setuid bit landed: %v %v", fi, err)
		}
	})
	t.Run("clean run has none", func(t *testing.T) {
		t.Parallel()
		r, res := spawnWithResult(t, newWorkspace(t), nil, "/bin/sh", "-c", "echo ok > out")
		if r.code != 0 || len(res.Violations) != 0 {
			t.Fatalf("a clean command reported violations: %+v\n%s", res.Violations, r)
		}
	})
}

// TestSeccompProfiles: Docker-format profiles take effect, broken ones are
// refused with one line, and unconfined is explicit and reported.
func TestSeccompProfiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	docker := filepath.Join(dir, "docker.json")
	// Default allow, but mkdir fails with EACCES: visible from a shell.
	writeFile(t, docker, `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
		"syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}`, 0o644)
	broken := filepath.Join(dir, "broken.json")
	writeFile(t, broken, `{"defaultAction":"SCMP_ACT_FROBNICATE"}`, 0o644)

	t.Run("docker profile applies", func(t *testing.T) {
		ws := newWorkspace(t)
		r, res := spawnWithResult(t, ws, []string{"--seccomp-profile", docker}, "/bin/sh", "-c", "mkdir d; echo rc=$?")
		if !strings.Contains(r.stdout, "rc=1") || !strings.Contains(r.stderr, "Permission denied") {
			t.Fatalf("mkdir must fail with EACCES under the profile\n%s", r)
		}
		if res.Seccomp != "file:"+docker {
			t.Errorf("result seccomp %q", res.Seccomp)
		}
		if _, err := os.Stat(filepath.Join(ws, "d")); err == nil {
			t.Error("mkdir landed despite the profile")
		}
	})
	// The C init hands the filter from a second thread to PID 1 with
	// system calls that run under the filter (futex, seccomp, exit,
	// getpid, tgkill, sched_yield). A profile that denies them must still
	// sandbox the command, with init loading the filter itself, and must
	// not hang when denials are reported (the listener is still in init
	// then). The command uses none of them in the harness's LANG=C (a
	// UTF-8 locale has glibc take a lock with futex).
	handover := filepath.Join(dir, "handover.json")
	writeFile(t, handover, `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_AARCH64"],
		"syscalls":[{"names":["futex","seccomp","tgkill","sched_yield","getpid"],"action":"SCMP_ACT_ERRNO","errnoRet":1},
		{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}`, 0o644)
	for _, verbose := range []bool{false, true} {
		t.Run(fmt.Sprintf("profile denying the init's handover calls, verbose=%v", verbose), func(t *testing.T) {
			t.Parallel()
			ws := newWorkspace(t)
			flags := []string{"--seccomp-profile", handover}
			if verbose {
				flags = append(flags, "--verbose")
			}
			cfg := spawnCfg{ws: ws, flags: flags, guard: 30 * time.Second}
			r := spawn(t, cfg, "/bin/grep", "-E", "^(Seccomp|Threads):", "/proc/1/status")
			mustExit(t, r, 0, "reading PID 1's state under the profile")
			if !strings.Contains(r.stdout, "Seccomp:\t2") {
				t.Errorf("PID 1 runs without the filter\n%s", r)
			}
			r = spawn(t, cfg, "/bin/mkdir", "d")
			if r.code == 0 || !strings.Contains(r.stderr, "Permission denied") {
				t.Errorf("mkdir must fail with EACCES under the profile\n%s", r)
			}
			if _, err := os.Stat(filepath.Join(ws, "d")); err == nil {
				t.Error("mkdir landed despite the profile")
			}
		})
	}
	t.Run("broken profile refused", func(t *testing.T) {
		r := spawn(t, spawnCfg{ws: newWorkspace(t), flags: []string{"--seccomp-profile", broken}}, "/bin/true")
		if r.code != 125 || !strings.Contains(r.stderr, "seccomp") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("want exit 125 and one line naming the profile\n%s", r)
		}
	})
	t.Run("unconfined is reported", func(t *testing.T) {
		ws := newWorkspace(t)
		if os.Geteuid() == 0 {
			// As root a root-owned workspace needs the filter (setuid
			// files); use one owned by the test user if there is one.
			chownToTestUser(t, ws)
		}
		r, res := spawnWithResult(t, ws, []string{"--seccomp-profile", "unconfined"}, "/bin/sh", "-c", "grep Seccomp: /proc/self/status")
		if r.code != 0 || !strings.Contains(r.stdout, "Seccomp:\t0") || res.Seccomp != "unconfined" {
			t.Fatalf("unconfined must run without a filter and say so\n%s\nresult %+v", r, res)
		}
	})
	t.Run("unconfined refused over a root-owned workspace as root", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("root mode only: needs root")
		}
		r := spawn(t, spawnCfg{ws: newWorkspace(t), flags: []string{"--seccomp-profile", "unconfined"}}, "/bin/true")
		if r.code != 125 || !strings.Contains(r.stderr, "setuid") {
			t.Fatalf("want a refusal naming the setuid risk\n%s", r)
		}
	})
}

// chownToTestUser hands a workspace to the unprivileged test user.
func chownToTestUser(t *testing.T, dir string) {
	t.Helper()
	u := testUser(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
}
