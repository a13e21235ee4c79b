//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWorkspaceWritesLandOnHost: files the sandbox writes in /workspace
// appear on the host, owned by the workspace owner (root mode, through the
// idmapped bind) or by the caller (rootless).
func TestWorkspaceWritesLandOnHost(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, ws string, wantUID, wantGID int) {
		t.Helper()
		r := sh(t, ws, nil, "echo hi > out && mkdir -p sub/dir && echo nested > sub/dir/f && id -u && stat -c %u /workspace /workspace/out")
		mustExit(t, r, 0, "write into the workspace")
		f := strings.Fields(r.stdout)
		if len(f) != 3 || f[0] == "0" || f[1] != f[0] || f[2] != f[0] {
			t.Errorf("inside, want a non-root uid that owns /workspace and the new file; got %v\n%s", f, r)
		}
		b, err := os.ReadFile(filepath.Join(ws, "out"))
		if err != nil || string(b) != "hi\n" {
			t.Fatalf("the sandbox's write did not land on the host: %q, %v\n%s", b, err, r)
		}
		for _, p := range []string{"out", "sub", "sub/dir/f"} {
			uid, gid := fileOwner(t, filepath.Join(ws, p))
			if uid != wantUID || gid != wantGID {
				t.Errorf("host %s is owned by %d:%d, want %d:%d", p, uid, gid, wantUID, wantGID)
			}
		}
	}
	t.Run("workspace owned by the caller", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		check(t, ws, os.Geteuid(), os.Getegid())
	})
	t.Run("root mode: workspace owned by another user", func(t *testing.T) {
		needRoot(t)
		t.Parallel()
		ws := newWorkspace(t)
		chownTree(t, ws, 4242, 4343)
		check(t, ws, 4242, 4343)
	})
	t.Run("default workspace is the current directory", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		r := spawn(t, spawnCfg{dir: ws}, "/bin/sh", "-c", "pwd; echo here > cwd-out")
		mustExit(t, r, 0, "spawn without --workspace")
		if strings.TrimSpace(r.stdout) != "/workspace" {
			t.Errorf("cwd inside is %q, want /workspace", strings.TrimSpace(r.stdout))
		}
		if !exists(filepath.Join(ws, "cwd-out")) {
			t.Errorf("the write did not land in the current directory %s", ws)
		}
	})
}

// TestHostToolsRun: bash, python3 and git from the host's /usr run inside.
func TestHostToolsRun(t *testing.T) {
	t.Parallel()
	need := func(t *testing.T, tool string) {
		t.Helper()
		if _, err := os.Stat("/usr/bin/" + tool); err != nil {
			t.Skipf("/usr/bin/%s is not installed on the host", tool)
		}
	}
	t.Run("bash", func(t *testing.T) {
		t.Parallel()
		need(t, "bash")
		r := spawn(t, spawnCfg{ws: newWorkspace(t)}, "bash", "-c", `a=(x y z); echo "${#a[@]} $BASH_VERSION"`)
		mustExit(t, r, 0, "bash")
		if !strings.HasPrefix(r.stdout, "3 ") {
			t.Errorf("bash output %q", r.stdout)
		}
	})
	t.Run("python3", func(t *testing.T) {
		t.Parallel()
		need(t, "python3")
		r := spawn(t, spawnCfg{ws: newWorkspace(t)}, "python3", "-c", `import json, os, ssl, sqlite3; print(json.dumps({"cwd": os.getcwd(), "n": 6*7}))`)
		mustExit(t, r, 0, "python3")
		if strings.TrimSpace(r.stdout) != `{"cwd": "/workspace", "n": 42}` {
			t.Errorf("python3 output %q", r.stdout)
		}
	})
	t.Run("git", func(t *testing.T) {
		t.Parallel()
		need(t, "git")
		ws := newWorkspace(t)
		r := sh(t, ws, nil, `git init -q . && echo content > file && git add file attacker && git -c user.name=Sandbox -c user.email=sandbox@example.com commit -q -m "from the sandbox" && git log --format=%s`)
		mustExit(t, r, 0, "git init + commit")
		if strings.TrimSpace(r.stdout) != "from the sandbox" {
			t.Errorf("git log inside: %q", r.stdout)
		}
		out, err := exec.Command("git", "-c", "safe.directory=*", "-C", ws, "log", "--format=%an %s").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "Sandbox from the sandbox" {
			t.Errorf("the commit is not visible on the host: %q, %v", out, err)
		}
	})
}

// TestExitStatus: the command's exit status and death by signal propagate.
func TestExitStatus(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	notExec := filepath.Join(ws, "not-executable")
	writeFile(t, notExec, "#!/bin/sh\nexit 0\n", 0o644)
	for _, tc := range []struct {
		name string
		argv []string
		want int
	}{
		{"exit 0", []string{"/bin/sh", "-c", "exit 0"}, 0},
		{"exit 1", []string{"/bin/sh", "-c", "exit 1"}, 1},
		{"exit 7", []string{"/bin/sh", "-c", "exit 7"}, 7},
		{"exit 255", []string{"/bin/sh", "-c", "exit 255"}, 255},
		{"false", []string{"false"}, 1},
		{"SIGTERM", []string{"/bin/sh", "-c", "kill -TERM $$"}, 143},
		{"SIGKILL", []string{"/bin/sh", "-c", "kill -KILL $$"}, 137},
		{"SIGSEGV", []string{"/bin/sh", "-c", "kill -SEGV $$"}, 139},
		{"SIGINT", []string{"/bin/sh", "-c", "kill -INT $$"}, 130},
		{"command not found", []string{"agentrun-no-such-command"}, 127},
		{"not executable", []string{"/workspace/not-executable"}, 126},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mustExit(t, spawn(t, spawnCfg{ws: ws}, tc.argv...), tc.want, strings.Join(tc.argv, " "))
		})
	}
}

// TestResultFile: --result writes the documented JSON.
func TestResultFile(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	for _, tc := range []struct {
		name     string
		script   string
		code     int
		signal   int
		timedOut bool
		flags    []string
	}{
		{"exit 3", "exit 3", 3, 0, false, nil},
		{"killed by SIGTERM", "kill -TERM $$", 143, 15, false, nil},
		{"timeout", "sleep 30", 124, -1, true, []string{"--timeout", "300ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := filepath.Join(tempDir(t), "result.json")
			r := spawn(t, spawnCfg{ws: ws, flags: append([]string{"--result", res}, tc.flags...)}, "/bin/sh", "-c", tc.script)
			mustExit(t, r, tc.code, tc.script)
			b, err := os.ReadFile(res)
			if err != nil {
				t.Fatalf("--result %s: %v\n%s", res, err, r)
			}
			var got struct {
				ExitCode   *int     `json:"exit_code"`
				Signal     *int     `json:"signal"`
				TimedOut   *bool    `json:"timed_out"`
				DurationMS *float64 `json:"duration_ms"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("--result is not JSON: %v\n%s", err, b)
			}
			if got.ExitCode == nil || got.Signal == nil || got.TimedOut == nil || got.DurationMS == nil {
				t.Fatalf("--result lacks exit_code, signal, timed_out or duration_ms:\n%s", b)
			}
			if *got.ExitCode != tc.code || *got.TimedOut != tc.timedOut || (tc.signal >= 0 && *got.Signal != tc.signal) {
				t.Errorf("--result = %s; want exit_code %d, signal %d, timed_out %v", b, tc.code, tc.signal, tc.timedOut)
			}
			if *got.DurationMS <= 0 {
				t.Errorf("duration_ms = %v, want > 0", *got.DurationMS)
			}
		})
	}
}

// TestStdinPipedThrough: the caller's stdin reaches the command.
func TestStdinPipedThrough(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	data := strings.Repeat("line of input\n", 10000)
	r := spawn(t, spawnCfg{ws: ws, stdin: strings.NewReader(data)}, "/bin/sh", "-c", "cat > /workspace/stdin.txt; wc -c < /workspace/stdin.txt")
	mustExit(t, r, 0, "cat stdin")
	if strings.TrimSpace(r.stdout) != strconv.Itoa(len(data)) {
		t.Errorf("the command read %s bytes of stdin, want %d", strings.TrimSpace(r.stdout), len(data))
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "stdin.txt")); string(b) != data {
		t.Errorf("stdin arrived altered (%d bytes)", len(b))
	}
}

// TestExtraMounts: --ro, --rw and --tmpfs.
func TestExtraMounts(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	roDir := tempDir(t)
	writeFile(t, filepath.Join(roDir, "data.txt"), "read-only data\n", 0o644)
	rwDir := tempDir(t)
	roFile := filepath.Join(tempDir(t), "single.txt")
	writeFile(t, roFile, "single file\n", 0o644)
	flags := []string{"--ro", roDir + ":/data/ro", "--rw", rwDir + ":/data/rw", "--tmpfs", "/scratch", "--ro", roFile + ":/etc/extra.txt", "--ro", roDir}

	t.Run("--ro is readable", func(t *testing.T) {
		t.Parallel()
		d := mustSucceed(t, attack(t, ws, flags, "read", "/data/ro/data.txt"), "read --ro file")
		if !strings.Contains(d, "read-only data") {
			t.Errorf("wrong content: %s", d)
		}
		mustSucceed(t, attack(t, ws, flags, "read", "/etc/extra.txt"), "read a --ro single file")
		mustSucceed(t, attack(t, ws, flags, "read", roDir+"/data.txt"), "read --ro PATH at its own path")
	})
	t.Run("--ro is not writable", func(t *testing.T) {
		t.Parallel()
		mustBlock(t, attack(t, ws, flags, "write", "/data/ro/data.txt", "PWNED"), "overwrite a --ro file")
		mustBlock(t, attack(t, ws, flags, "write", "/data/ro/new.txt", "PWNED"), "create in a --ro dir")
		mustBlock(t, attack(t, ws, flags, "write", "/etc/extra.txt", "PWNED"), "overwrite a --ro single file")
		mustBlock(t, attack(t, ws, flags, "mountop", "setattr-rw", "/data/ro"), "make --ro writable")
		mustBlock(t, attack(t, ws, flags, "mountop", "remount-rw", "/data/ro"), "remount --ro read-write")
	})
	t.Run("--rw is writable", func(t *testing.T) {
		t.Parallel()
		mustSucceed(t, attack(t, ws, flags, "write", "/data/rw/new.txt", "written"), "write into --rw")
		if b, err := os.ReadFile(filepath.Join(rwDir, "new.txt")); err != nil || string(b) != "written" {
			t.Errorf("the --rw write did not land on the host: %q, %v", b, err)
		} else if uid, _ := fileOwner(t, filepath.Join(rwDir, "new.txt")); uid != os.Geteuid() {
			t.Errorf("--rw file owned by %d on the host, want the directory owner %d", uid, os.Geteuid())
		}
	})
	t.Run("--tmpfs is empty, writable and private", func(t *testing.T) {
		t.Parallel()
		mustBlock(t, attack(t, ws, flags, "ls", "/scratch"), "list a fresh --tmpfs (must be empty)")
		mustSucceed(t, attack(t, ws, flags, "write", "/scratch/x", "x"), "write into --tmpfs")
		r := sh(t, ws, flags, "echo x > /scratch/y && cat /scratch/y")
		mustExit(t, r, 0, "write and read back in --tmpfs")
	})
	t.Run("host files unchanged", func(t *testing.T) {
		t.Parallel()
		if b, _ := os.ReadFile(filepath.Join(roDir, "data.txt")); string(b) != "read-only data\n" {
			t.Errorf("--ro source changed: %q", b)
		}
		if exists(filepath.Join(roDir, "new.txt")) {
			t.Errorf("a file appeared in the --ro source")
		}
	})
	t.Run("/tmp inside is empty and writable", func(t *testing.T) {
		t.Parallel()
		r := sh(t, ws, nil, `test -z "$(ls -A /tmp)" && echo x > /tmp/f && cat /tmp/f && echo y > /var/tmp/f && echo y > /dev/shm/f`)
		mustExit(t, r, 0, "/tmp is empty and writable")
	})
}

// TestLimits: rlimits from the policy hold; cgroup limits hold once wired.
func TestLimits(t *testing.T) {
	t.Parallel()
	t.Run("--fsize stops a disk bomb", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		mustBlock(t, attack(t, ws, []string{"--fsize", "1M"}, "fill", "/workspace/big", "8"), "write 8 MiB under --fsize 1M")
		if fi, err := os.Stat(filepath.Join(ws, "big")); err == nil && fi.Size() > 1<<20 {
			t.Errorf("the host file grew to %d bytes under --fsize 1M", fi.Size())
		}
	})
	t.Run("--nproc stops a fork bomb", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		mustBlock(t, attack(t, ws, []string{"--nproc", "16"}, "forkn", "64", "5"), "start 64 processes under --nproc 16")
	})
	t.Run("/dev/shm is capped", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		mustBlock(t, attack(t, ws, nil, "fill", "/dev/shm/big", "128"), "write 128 MiB into /dev/shm (capped at 64 MiB)")
	})
	// cgroup accepts the fail-closed outcome where it is the right one: a
	// caller without cgroup delegation gets exit 125 and one line saying
	// how to get it. Root on these hosts always has cgroups, so for root
	// that outcome is a failure.
	cgroup := func(t *testing.T, r runResult) (enforced bool) {
		t.Helper()
		if r.code != 125 {
			return true
		}
		msg := strings.TrimSpace(r.stderr)
		switch {
		case os.Geteuid() == 0:
			t.Fatalf("root must be able to enforce cgroup limits here: %s", msg)
		case os.Getenv("VMTEST_MODE") == "user-systemd":
			t.Fatalf("with a systemd user manager the limits must go through a transient scope: %s", msg)
		case strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "cgroup") || !strings.Contains(msg, "Delegate"):
			t.Fatalf("without delegation the refusal must be one line naming cgroups and how to get delegation, got:\n%s", msg)
		}
		t.Logf("failed closed as expected without cgroup delegation: %s", msg)
		return false
	}
	t.Run("--pids stops a fork bomb", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		r := attack(t, ws, []string{"--pids", "16"}, "forkn", "64", "5")
		if cgroup(t, r) {
			mustBlock(t, r, "start 64 processes under --pids 16")
		}
	})
	// pids.max counts PID 1 too, so 2 is exactly init and the command.
	// The C init has a second thread while it builds the sandbox, which
	// must be gone from the count before the command is forked. A
	// remnant would refuse about 2 % of the forks, which 150 runs catch
	// 19 times in 20.
	t.Run("--pids 2 fits the command, and nothing more", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		n := 150
		if os.Getenv("VMTEST_MODE") == "user-systemd" {
			// There every spawn asks the systemd user manager for a
			// transient scope, and about 60 back to back made its
			// ControlGroup call time out (10 s). The race is the
			// init's, the same in every mode; the other runs cover it.
			n = 20
		}
		for i := 0; i < n; i++ {
			r := spawn(t, spawnCfg{ws: ws, flags: []string{"--pids", "2"}}, "/bin/sh", "-c", "exit 4")
			if i == 0 && !cgroup(t, r) {
				return
			}
			mustExit(t, r, 4, fmt.Sprintf("spawn %d under --pids 2", i+1))
		}
		r := spawn(t, spawnCfg{ws: ws, flags: []string{"--pids", "2"}}, "/bin/sh", "-c", "/bin/true && echo FORKED")
		if strings.Contains(r.stdout, "FORKED") {
			t.Errorf("the command forked a third process under --pids 2\n%s", r)
		}
	})
	t.Run("--memory stops a memory bomb", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		r := attack(t, ws, []string{"--memory", "64M"}, "alloc", "512")
		if !cgroup(t, r) {
			return
		}
		if v, _ := r.verdict(); v == "ESCAPED" {
			t.Errorf("allocated 512 MiB under --memory 64M\n%s", r)
		} else if r.code != 137 {
			t.Errorf("want the OOM kill (exit 137), got exit %d\n%s", r.code, r)
		}
	})
}

// TestBadInput: setup errors exit 125 with one line on stderr and leave
// nothing behind on the host.
func TestBadInput(t *testing.T) {
	t.Parallel()
	base := tempDir(t)
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(base, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	srcLink := filepath.Join(base, "srclink")
	if err := os.Symlink(src, srcLink); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(base, "missing")
	badJSON := filepath.Join(base, "bad.json")
	writeFile(t, badJSON, `{"workspace": `, 0o644)
	unknownField := filepath.Join(base, "unknown.json")
	writeFile(t, unknownField, `{"workspace": "`+real+`", "netwrk": "host"}`, 0o644)
	cmd := []string{"--", "/bin/sh", "-c", "echo ran > /workspace/ran"}

	for _, tc := range []struct {
		name string
		args []string
		want string // substring of the one-line message
	}{
		{"missing workspace", append([]string{"--workspace", missing}, cmd...), missing},
		{"workspace is a symlink", append([]string{"--workspace", link}, cmd...), real},
		{"workspace is a file", append([]string{"--workspace", badJSON}, cmd...), badJSON},
		{"unknown flag", append([]string{"--workspace", real, "--bogus-flag"}, cmd...), "bogus-flag"},
		{"--ro source missing", append([]string{"--workspace", real, "--ro", missing + ":/data"}, cmd...), missing},
		{"--rw source missing", append([]string{"--workspace", real, "--rw", missing + ":/data"}, cmd...), missing},
		{"--rw source is a symlink", append([]string{"--workspace", real, "--rw", srcLink + ":/data"}, cmd...), "symlink"},
		{"destination with ..", append([]string{"--workspace", real, "--tmpfs", "/data/../etc"}, cmd...), ".."},
		{"relative destination", append([]string{"--workspace", real, "--ro", src + ":data"}, cmd...), "data"},
		{"relative tmpfs", append([]string{"--workspace", real, "--tmpfs", "scratch"}, cmd...), "scratch"},
		{"duplicate destination", append([]string{"--workspace", real, "--tmpfs", "/data", "--ro", src + ":/data"}, cmd...), "/data"},
		{"destination over /proc", append([]string{"--workspace", real, "--tmpfs", "/proc"}, cmd...), "/proc"},
		{"malformed --policy", append([]string{"--workspace", real, "--policy", badJSON}, cmd...), "bad.json"},
		{"--policy with unknown field", append([]string{"--workspace", real, "--policy", unknownField}, cmd...), "netwrk"},
		{"--policy missing", append([]string{"--workspace", real, "--policy", missing}, cmd...), missing},
		{"--net bogus", append([]string{"--workspace", real, "--net", "bogus"}, cmd...), "bogus"},
		{"--env without =", append([]string{"--workspace", real, "--env", "NOEQUALS"}, cmd...), "NOEQUALS"},
		{"--timeout bogus", append([]string{"--workspace", real, "--timeout", "soon"}, cmd...), "soon"},
		{"no command", []string{"--workspace", real}, "command"},
		{"empty command", []string{"--workspace", real, "--"}, "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := spawn(t, spawnCfg{flags: tc.args, dir: base})
			mustExit(t, r, 125, tc.name)
			msg := strings.TrimRight(r.stderr, "\n")
			if msg == "" || strings.Contains(msg, "\n") {
				t.Errorf("want exactly one line on stderr, got %q", r.stderr)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("the message %q does not name %q", msg, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout is not empty: %q", r.stdout)
			}
			if got := listDir(t, base); strings.Join(got, " ") != "bad.json link real src srclink unknown.json" {
				t.Errorf("the host directory changed: %v", got)
			}
			if got := listDir(t, real); len(got) != 0 {
				t.Errorf("the workspace changed (the command ran?): %v", got)
			}
			if exists(missing) {
				t.Errorf("%s was created", missing)
			}
		})
	}
	t.Run("--result records the setup error", func(t *testing.T) {
		res := filepath.Join(tempDir(t), "result.json")
		r := spawn(t, spawnCfg{flags: []string{"--workspace", missing, "--result", res, "--", "true"}, dir: base})
		mustExit(t, r, 125, "missing workspace with --result")
		b, err := os.ReadFile(res)
		if err != nil {
			t.Fatalf("no --result after a setup error: %v", err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil || got["exit_code"] != float64(125) {
			t.Errorf("--result after a setup error: %s (%v)", b, err)
		}
	})
}
