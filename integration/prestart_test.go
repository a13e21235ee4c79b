//go:build linux

package integration

import (
	"bytes"
	encbin "encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/passenv"
)

// fingerprint prints what a sandbox looks like from inside: ids,
// capabilities, no_new_privs and seccomp mode, ignored and blocked
// signals, the id maps, every mount
// (less the ids and device numbers that differ between any two runs), the
// cgroup, rlimits, environment, the root's entries, what PID 1 shows, and
// whether PID 1's binary can be reached. A prestarted sandbox must print
// exactly what one spawned without prestart prints.
const fingerprint = `id
grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Sig(Ign|Blk)):' /proc/self/status
hostname
cat /proc/self/uid_map /proc/self/gid_map
awk '{ $1 = ""; $2 = ""; $3 = ""; for (i = 7; i <= NF && $i != "-"; i++) $i = ""; print }' /proc/self/mountinfo
cat /proc/self/cgroup
ulimit -a
env | sort
pwd
ls -la / | awk 'NR > 1 { print $1, $NF }'
tr -d '\0' < /proc/1/cmdline; echo
readlink /proc/1/exe 2>&1 || echo "no /proc/1/exe"
echo "$0" > /workspace/probe
exit 7`

// prestartResult reads the fields of --result this test checks.
type prestartResult struct {
	ExitCode int    `json:"exit_code"`
	Limits   string `json:"limits"`
	Prestart string `json:"prestart"`
}

func readResult(t *testing.T, path string, r runResult) prestartResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("--result: %v\n%s", err, r)
	}
	var res prestartResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("--result: %v\n%s", err, b)
	}
	return res
}

// imagePath is where the constructor looks for the image of a spawn with
// these flags from dir, with the environment startSpawn gives agentrun
// plus env (prestart.c: the key and the cache directory).
func imagePath(uid, gid int, stateRoot, dir string, flags, env []string) string {
	key := []string{"agentrun-prestart-1", fmt.Sprintf("uid=%d gid=%d", uid, gid), dir}
	key = append(key, flags...)
	// The variables that reach the command, as os/exec passes them (the
	// last of duplicates); "K" alone when unset.
	vals := map[string]string{}
	for _, kv := range append([]string{"PATH=" + sandboxPath, "LANG=C"}, env...) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vals[k] = v
		}
	}
	for _, k := range passenv.Names {
		if v, ok := vals[k]; ok {
			key = append(key, k+"="+v)
		} else {
			key = append(key, k)
		}
	}
	h := fnv.New64a()
	for _, k := range key {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return filepath.Join(stateRoot, "prestart", fmt.Sprintf("%016x", h.Sum64()))
}

// TestPrestart: the CLI starts a spawn's init before its Go runtime from a
// plan cached by an earlier spawn with the same flags. That sandbox must be
// the one a spawn without prestart builds, and any cached plan that is not
// this spawn's (another environment, a corrupted or foreign file) must be
// thrown away, never run.
func TestPrestart(t *testing.T) {
	t.Run("as the caller", func(t *testing.T) {
		t.Parallel()
		cfg := spawnCfg{env: []string{"TERM=dumb"}}
		stateRoot := "/run/agentrun"
		uid, gid := os.Geteuid(), os.Getegid()
		if !isRoot() {
			xdg := privateDir(t, uid, gid)
			cfg.env = append(cfg.env, "XDG_RUNTIME_DIR="+xdg)
			stateRoot = filepath.Join(xdg, "agentrun")
		}
		testPrestart(t, cfg, uid, gid, stateRoot)
	})
	t.Run("rootless caller started by root", func(t *testing.T) {
		needRoot(t)
		u := testUser(t)
		if u == nil {
			t.Skipf("no unprivileged test user ($%s)", envTestUser)
		}
		t.Parallel()
		sys := credential(t, u)
		uid, gid := int(sys.Credential.Uid), int(sys.Credential.Gid)
		xdg := privateDir(t, uid, gid)
		cfg := spawnCfg{sys: sys, env: []string{"TERM=dumb", "XDG_RUNTIME_DIR=" + xdg}}
		testPrestart(t, cfg, uid, gid, filepath.Join(xdg, "agentrun"))
	})
}

// prestartCaller is the configuration of a caller that can prestart:
// root, or a user with a private runtime directory.
func prestartCaller(t *testing.T) spawnCfg {
	t.Helper()
	t.Parallel()
	cfg := spawnCfg{}
	if !isRoot() {
		cfg.env = []string{"XDG_RUNTIME_DIR=" + privateDir(t, os.Geteuid(), os.Getegid())}
	}
	return cfg
}

// warmPrestart spawns /bin/true twice with cfg (whose --result is res):
// a miss that caches the plan, then a hit. On cgroup v2 the init cannot be
// adopted (TestPrestart), so both are misses; what the callers check
// afterwards still holds.
func warmPrestart(t *testing.T, cfg spawnCfg, res, what string) {
	t.Helper()
	want := "miss"
	for range 2 {
		r := spawn(t, cfg, "/bin/true")
		mustExit(t, r, 0, what)
		got := readResult(t, res, r)
		if got.Prestart != want {
			t.Fatalf("%s: prestart %q, want %q\n%s", what, got.Prestart, want, r)
		}
		if got.Limits != "cgroup-v2" {
			want = "hit"
		}
	}
}

// TestPrestartPolicyFile: the content of --policy is part of the cache key.
// An init started from a stale plan builds its root before the Go side
// finds it stale, and mount points under /workspace are created in the
// host's directory: a plan from an older policy must not run at all.
func TestPrestartPolicyFile(t *testing.T) {
	cfg := prestartCaller(t)
	ws := newWorkspace(t)
	src := tempDir(t)
	dir := tempDir(t)
	pol := filepath.Join(dir, "policy.json")
	res := filepath.Join(dir, "result.json")
	writeFile(t, pol, `{"mounts": [{"source": "`+src+`", "dest": "/workspace/from-policy", "mode": "ro"}]}`, 0o644)
	cfg.ws = ws
	cfg.flags = []string{"--policy", pol, "--result", res}
	warmPrestart(t, cfg, res, "spawn with the policy's bind")
	writeFile(t, pol, `{}`, 0o644)
	if err := os.Remove(filepath.Join(ws, "from-policy")); err != nil {
		t.Fatal(err)
	}
	r := spawn(t, cfg, "/bin/true")
	mustExit(t, r, 0, "spawn with the bind gone from the policy")
	if got := readResult(t, res, r).Prestart; got != "miss" {
		t.Errorf("changed policy file: prestart %q, want miss (a new key)", got)
	}
	if exists(filepath.Join(ws, "from-policy")) {
		t.Errorf("HOST CHANGED: a plan from the old policy created %s", filepath.Join(ws, "from-policy"))
	}
}

// TestPrestartStalePlanWritesNothing: the cached plan is checked only
// once Go runs, and the early init may build its root before that. It
// must not create anything inside a host directory until then: here the
// workspace is named through a symlink that is pointed elsewhere after
// the plan was cached, and the plan has a mount point inside the
// workspace. The old target must stay untouched.
func TestPrestartStalePlanWritesNothing(t *testing.T) {
	cfg := prestartCaller(t)
	dir := tempDir(t)
	for _, d := range []string{"a/w", "b/w"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("a", link); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(dir, "result.json")
	cfg.flags = []string{"--workspace", filepath.Join(link, "w"), "--tmpfs", "/workspace/mnt", "--result", res}
	warmPrestart(t, cfg, res, "spawn with a mount inside the workspace")
	old := filepath.Join(dir, "a", "w", "mnt")
	if err := os.Remove(old); err != nil {
		t.Fatalf("the mount point the spawns made: %v", err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b", link); err != nil {
		t.Fatal(err)
	}
	r := spawn(t, cfg, "/bin/true")
	mustExit(t, r, 0, "spawn after the symlink moved")
	if got := readResult(t, res, r); got.Prestart == "hit" {
		t.Errorf("the plan of the old workspace was adopted (prestart %q)", got.Prestart)
	}
	if exists(old) {
		t.Errorf("HOST CHANGED: an init started from the stale plan created %s", old)
	}
	if !exists(filepath.Join(dir, "b", "w", "mnt")) {
		t.Errorf("the spawn did not make its mount point in the new workspace")
	}
}

// TestPrestartLimitsHold: a prestarted init joins its cgroup only at its
// release (the tasks files come with it). A fork bomb on a hit must stop
// at the pids limit, as it does without prestart.
func TestPrestartLimitsHold(t *testing.T) {
	cfg := prestartCaller(t)
	if !isRoot() {
		t.Skip("needs root: cgroup limits on this v1 host need root (the rootless cgroup paths are the cgroups suite's and vmtest's)")
	}
	dir := tempDir(t)
	res := filepath.Join(dir, "result.json")
	cfg.ws = newWorkspace(t)
	cfg.flags = []string{"--pids", "16", "--result", res}
	warmPrestart(t, cfg, res, "spawn with a pids limit")
	r := spawn(t, cfg, "/bin/sh", "-c", `i=0; while [ $i -lt 64 ]; do sleep 5 & i=$((i+1)); done; echo forked $i`)
	var got struct {
		Prestart string `json:"prestart"`
		PidsPeak uint64 `json:"pids_peak"`
		Limits   string `json:"limits"`
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatalf("--result: %v\n%s", err, r)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Limits != "cgroup-v2" && got.Prestart != "hit" {
		t.Fatalf("prestart %q, want hit\n%s", got.Prestart, r)
	}
	if got.PidsPeak == 0 || got.PidsPeak > 16 || strings.Contains(r.stdout, "forked 64") {
		t.Errorf("SANDBOX LIMIT: a fork bomb on a prestart hit reached pids_peak %d (limit 16), stdout %q\n%s", got.PidsPeak, r.stdout, r)
	}
}

// TestPrestartPolicyPipe: a --policy that is a pipe (stdin) or a FIFO is
// read by Go alone. The constructor must not open it (it took the content,
// or made the FIFO's writer die of SIGPIPE while Go's open hung).
func TestPrestartPolicyPipe(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	policy := `{"env": ["FROM_POLICY=yes"]}`
	check := []string{"/bin/sh", "-c", `echo "FROM_POLICY=$FROM_POLICY"`}
	for _, kind := range []string{"fifo", "stdin"} {
		t.Run(kind, func(t *testing.T) {
			// A workspace of its own: the default, the current directory,
			// may hold the runtime directory, which is refused
			// (TestStateNotWritableFromSandbox).
			cfg := spawnCfg{ws: newWorkspace(t), guard: 20 * time.Second}
			if !isRoot() {
				cfg.env = []string{"XDG_RUNTIME_DIR=" + privateDir(t, os.Geteuid(), os.Getegid())}
			}
			switch kind {
			case "fifo":
				fifo := filepath.Join(dir, "policy.fifo")
				if err := syscall.Mkfifo(fifo, 0o600); err != nil {
					t.Fatal(err)
				}
				go func() {
					if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
						_, _ = f.WriteString(policy)
						f.Close()
					}
				}()
				cfg.flags = []string{"--policy", fifo}
			case "stdin":
				cfg.stdin = strings.NewReader(policy)
				// /proc/self/fd/0 rather than /dev/stdin, which a minimal
				// /dev (the vmtest VM's) lacks.
				cfg.flags = []string{"--policy", "/proc/self/fd/0"}
			}
			r := spawn(t, cfg, check...)
			mustExit(t, r, 0, "spawn with its policy on a "+kind)
			if got := strings.TrimSpace(r.stdout); got != "FROM_POLICY=yes" {
				t.Errorf("policy from a %s: the command saw %q, want FROM_POLICY=yes\n%s", kind, got, r)
			}
		})
	}
}

// rechecksum makes an edited image's checksum (cinit.h's struct
// ar_image, offset 16: FNV-1a 64 of the image with the field zero) valid.
func rechecksum(b []byte) {
	const checksum = 16
	encbin.NativeEndian.PutUint64(b[checksum:], 0)
	h := fnv.New64a()
	h.Write(b)
	encbin.NativeEndian.PutUint64(b[checksum:], h.Sum64())
}

// privateDir is a 0700 directory owned by uid, as a runtime directory is.
func privateDir(t *testing.T, uid, gid int) string {
	t.Helper()
	d := filepath.Join(tempDir(t), "run")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, uid, gid); err != nil {
		t.Fatal(err)
	}
	return d
}

func testPrestart(t *testing.T, base spawnCfg, uid, gid int, stateRoot string) {
	ws := newWorkspace(t)
	chownTree(t, ws, uid, gid)
	resDir := privateDir(t, uid, gid)
	res := filepath.Join(resDir, "result.json")
	base.ws = ws
	base.flags = []string{"--result", res}
	flags := append([]string{"--workspace", ws}, base.flags...)
	image := imagePath(uid, gid, stateRoot, os.TempDir(), flags, base.env)
	t.Cleanup(func() { _ = os.Remove(image) })

	run := func(what string, env []string, command ...string) (runResult, prestartResult) {
		t.Helper()
		cfg := base
		cfg.env = append(append([]string{}, base.env...), env...)
		r := spawn(t, cfg, command...)
		return r, readResult(t, res, r)
	}
	sh := []string{"/bin/sh", "-c", fingerprint}

	// The reference: no prestart at all.
	ref, refRes := run("reference", []string{"AGENTRUN_PRESTART=0"}, append(sh, "first")...)
	mustExit(t, ref, 7, "reference spawn")
	if refRes.Prestart != "" {
		t.Errorf("AGENTRUN_PRESTART=0: prestart %q, want none", refRes.Prestart)
	}
	if _, err := os.Stat(image); err == nil {
		t.Errorf("AGENTRUN_PRESTART=0 cached an image at %s", image)
	}

	first, firstRes := run("first", nil, append(sh, "first")...)
	mustExit(t, first, 7, "first spawn")
	if firstRes.Prestart != "miss" {
		t.Fatalf("first spawn with new flags: prestart %q, want miss\n%s", firstRes.Prestart, first)
	}
	if first.stdout != ref.stdout {
		t.Errorf("a spawn that cached its plan differs from the reference:\n--- reference\n%s\n--- this\n%s", ref.stdout, first.stdout)
	}
	if refRes.Limits == "cgroup-v2" {
		// The init joins its cgroup at its release; on v2 only
		// CLONE_INTO_CGROUP does that without a grace-period wait, so no
		// image is kept and no init is started ahead.
		if _, err := os.Stat(image); err == nil {
			t.Errorf("cgroup v2: an image was cached at %s, though its init could not be adopted", image)
		}
		again, againRes := run("again", nil, append(sh, "first")...)
		mustExit(t, again, 7, "second spawn")
		if againRes.Prestart != "miss" || again.stdout != ref.stdout {
			t.Errorf("cgroup v2: second spawn prestart %q (want miss), same sandbox %v", againRes.Prestart, again.stdout == ref.stdout)
		}
		return
	}
	fi, err := os.Lstat(image)
	if err != nil {
		t.Fatalf("no image cached after a miss: %v", err)
	}
	if st := fi.Mode(); !st.IsRegular() || st.Perm()&0o077 != 0 {
		t.Errorf("image %s has mode %v, want a regular file only its owner can read", image, st)
	}

	// A hit: the same sandbox, the command's status, its workspace write.
	hit, hitRes := run("hit", nil, append(sh, "second")...)
	mustExit(t, hit, 7, "prestarted spawn")
	if hitRes.Prestart != "hit" {
		t.Fatalf("second spawn with the same flags: prestart %q, want hit\n%s", hitRes.Prestart, hit)
	}
	if hit.stdout != ref.stdout {
		t.Errorf("SANDBOX DIFFERS: a prestarted sandbox is not the one spawned without prestart:\n--- reference\n%s\n--- prestarted\n%s", ref.stdout, hit.stdout)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "probe")); err != nil || string(b) != "second\n" {
		t.Errorf("workspace write of the prestarted command: %q, %v; want \"second\\n\"", b, err)
	}

	// A closed stdin: until Go's runtime puts /dev/null there, fd 0 is free,
	// and a socket or mount the constructor made could land on it and reach
	// the command as its stdin (the parent's end of the sync socket would
	// hand it init's reports and its seccomp listener). The constructor
	// must leave such a spawn to Go.
	wrapper := filepath.Join(resDir, "closed-stdin")
	writeFile(t, wrapper, "#!/bin/sh\nexec "+agentrunBin+" \"$@\" <&-\n", 0o755)
	closed := base
	closed.bin = wrapper
	cr := spawn(t, closed, "/bin/sh", "-c", "readlink /proc/self/fd/0")
	mustExit(t, cr, 0, "spawn with stdin closed")
	if got := strings.TrimSpace(cr.stdout); got != "/dev/null" {
		t.Errorf("SANDBOX STDIN: with the caller's stdin closed the command's fd 0 is %q, want /dev/null\n%s", got, cr)
	}
	if crRes := readResult(t, res, cr); crRes.Prestart == "hit" {
		t.Errorf("stdin closed: prestart %q, want no prestart", crRes.Prestart)
	}

	// A caller that ignores signals: the constructor runs with the caller's
	// dispositions, which Go's runtime would have replaced. The command must
	// not inherit them, and init must see its command exit even with
	// SIGCHLD ignored (it hung: the kernel reaped the command unseen).
	ignoring := filepath.Join(resDir, "ignoring")
	// env(1) of coreutils 9, because a shell's trap cannot ignore SIGCHLD.
	script := "#!/bin/sh\nexec env --ignore-signal=TERM,USR1,PIPE,QUIT,HUP,INT,CHLD,XFSZ,TSTP,TTIN,TTOU,CONT " + agentrunBin + " \"$@\"\n"
	if exec.Command("env", "--ignore-signal=CHLD", "true").Run() != nil {
		t.Logf("env(1) here cannot ignore signals (coreutils 9 can): a shell trap ignores them instead, which leaves SIGCHLD out")
		script = "#!/bin/sh\ntrap '' TERM USR1 PIPE QUIT HUP INT XFSZ\nexec " + agentrunBin + " \"$@\"\n"
	}
	writeFile(t, ignoring, script, 0o755)
	ign := base
	ign.bin = ignoring
	ign.guard = 20 * time.Second
	ign.env = append(append([]string{}, base.env...), "AGENTRUN_PRESTART=0")
	ignRef := spawn(t, ign, append(sh, "second")...)
	mustExit(t, ignRef, 7, "reference spawn from a caller that ignores signals")
	ign.env = base.env
	ignHit := spawn(t, ign, append(sh, "second")...)
	mustExit(t, ignHit, 7, "prestarted spawn from a caller that ignores signals")
	if r := readResult(t, res, ignHit); r.Prestart != "hit" {
		t.Errorf("caller ignoring signals: prestart %q, want hit", r.Prestart)
	}
	if ignHit.stdout != ignRef.stdout {
		t.Errorf("SANDBOX DIFFERS for a caller that ignores signals:\n--- without prestart\n%s\n--- prestarted\n%s", ignRef.stdout, ignHit.stdout)
	}

	// Another command with the same flags: the command comes from this
	// command line, not from the cached plan.
	other, otherRes := run("other command", nil, "/bin/sh", "-c", `echo "other $0"; exit 3`, "cmd")
	mustExit(t, other, 3, "other command")
	if otherRes.Prestart != "hit" || strings.TrimSpace(other.stdout) != "other cmd" {
		t.Errorf("other command: prestart %q, stdout %q; want hit and \"other cmd\"", otherRes.Prestart, other.stdout)
	}

	// A cached plan that loads but is not this spawn's, as after a change
	// of the host that the key does not cover: the init started from it is
	// killed, and the sandbox is the one this spawn's plan gives.
	envCheck := []string{"/bin/sh", "-c", `echo "TERM=$TERM"`}
	b, err := os.ReadFile(image)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte("TERM=dumb\x00"))
	if at < 0 {
		t.Fatalf("no TERM=dumb in the image %s", image)
	}
	copy(b[at:], "TERM=evil")
	rechecksum(b)
	if err := os.WriteFile(image, b, 0o600); err != nil {
		t.Fatal(err)
	}
	mis, misRes := run("mismatch", nil, envCheck...)
	mustExit(t, mis, 0, "spawn from a plan that is not its own")
	if misRes.Prestart != "mismatch" || strings.TrimSpace(mis.stdout) != "TERM=dumb" {
		t.Errorf("a cached plan with another TERM: prestart %q, stdout %q; want mismatch and TERM=dumb", misRes.Prestart, mis.stdout)
	}
	again, againRes := run("after mismatch", nil, envCheck...)
	if againRes.Prestart != "hit" || strings.TrimSpace(again.stdout) != "TERM=dumb" {
		t.Errorf("after a mismatch: prestart %q, stdout %q; want hit (the image was replaced)", againRes.Prestart, again.stdout)
	}

	// Another value of a variable that reaches the command is another
	// key: a miss (no init started only to be killed), then a hit.
	for _, want := range []string{"miss", "hit"} {
		r, rr := run("another TERM", []string{"TERM=vt100-prestart"}, envCheck...)
		if rr.Prestart != want || strings.TrimSpace(r.stdout) != "TERM=vt100-prestart" {
			t.Errorf("another TERM: prestart %q, stdout %q; want %s and TERM=vt100-prestart", rr.Prestart, r.stdout, want)
		}
	}

	// Images the constructor must not use: each spawn must report miss
	// (nothing was started from it) and build the reference sandbox.
	tamper := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"corrupted", func(t *testing.T) {
			b, err := os.ReadFile(image)
			if err != nil {
				t.Fatal(err)
			}
			// A byte inside the plan: the checksum no longer matches.
			b[len(b)/2] ^= 0x5a
			if err := os.WriteFile(image, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T) {
			if err := os.Truncate(image, 64); err != nil {
				t.Fatal(err)
			}
		}},
		{"writable by others", func(t *testing.T) {
			if err := os.Chmod(image, 0o622); err != nil {
				t.Fatal(err)
			}
		}},
		{"a symlink", func(t *testing.T) {
			target := filepath.Join(resDir, "image-copy")
			b, err := os.ReadFile(image)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, b, 0o600); err != nil {
				t.Fatal(err)
			}
			_ = os.Chown(target, uid, gid)
			if err := os.Remove(image); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, image); err != nil {
				t.Fatal(err)
			}
		}},
		{"written by another build", func(t *testing.T) {
			b, err := os.ReadFile(image)
			if err != nil {
				t.Fatal(err)
			}
			// exe_ino (cinit.h's struct ar_image), with the checksum fixed
			// up, so that only the binary's identity is wrong.
			const exeIno = 32
			encbin.NativeEndian.PutUint64(b[exeIno:], encbin.NativeEndian.Uint64(b[exeIno:])+1)
			rechecksum(b)
			if err := os.WriteFile(image, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tamper {
		// The state directory is root's or the caller's: as root the
		// tampering runs here, for a rootless caller on its files too.
		tc.do(t)
		if isRoot() {
			_ = os.Lchown(image, uid, gid)
		}
		r, rr := run(tc.name, nil, append(sh, "first")...)
		mustExit(t, r, 7, tc.name+" image")
		if rr.Prestart != "miss" {
			t.Errorf("%s image: prestart %q, want miss (not used)\n%s", tc.name, rr.Prestart, r)
		}
		if r.stdout != ref.stdout {
			t.Errorf("%s image: the sandbox differs from the reference:\n--- reference\n%s\n--- this\n%s", tc.name, ref.stdout, r.stdout)
		}
		// The miss wrote a good image back.
		if r2, rr2 := run(tc.name+", then", nil, append(sh, "first")...); rr2.Prestart != "hit" {
			t.Errorf("after the %s image was replaced: prestart %q, want hit\n%s", tc.name, rr2.Prestart, r2)
		}
	}

	// A spawn refused after its init may have been started (the workspace
	// is gone) fails as without prestart, and leaves the image for later.
	if err := os.Rename(ws, ws+".moved"); err != nil {
		t.Fatal(err)
	}
	gone, goneRes := run("workspace gone", nil, append(sh, "first")...)
	mustExit(t, gone, 125, "spawn whose workspace is gone")
	if goneRes.ExitCode != 125 || !strings.Contains(gone.stderr, "workspace") {
		t.Errorf("spawn whose workspace is gone: result exit %d, stderr %q; want 125 naming the workspace", goneRes.ExitCode, gone.stderr)
	}
	if err := os.Rename(ws+".moved", ws); err != nil {
		t.Fatal(err)
	}
	back, backRes := run("workspace back", nil, append(sh, "first")...)
	mustExit(t, back, 7, "spawn with the workspace back")
	if backRes.Prestart != "hit" || back.stdout != ref.stdout {
		t.Errorf("workspace back: prestart %q (want hit), same sandbox as the reference: %v", backRes.Prestart, back.stdout == ref.stdout)
	}
}

// TestPrestartKilledEarly: SIGKILL to the CLI at any point of a hit (while
// its starter process clones the init, while the init builds the root,
// after the command started) leaves no starter, init or command behind.
func TestPrestartKilledEarly(t *testing.T) {
	cfg, _ := warmCaller(t)
	for _, delay := range []time.Duration{0, 200 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 30 * time.Millisecond} {
		m := fmt.Sprintf("334.%06d", time.Now().UnixNano()%1000000)
		run := startSpawn(t, cfg, "/bin/sleep", m)
		time.Sleep(delay)
		if err := syscall.Kill(run.pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		r := run.wait()
		mustExit(t, r, 128+int(syscall.SIGKILL), fmt.Sprintf("agentrun killed after %v", delay))
		mustNotSurvive(t, fmt.Sprintf("agentrun killed after %v", delay), m)
		if left := orphanInits(); len(left) > 0 {
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && len(orphanInits()) > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if left := orphanInits(); len(left) > 0 {
				t.Errorf("agentrun killed after %v: inits without their agentrun survived: %v", delay, left)
			}
		}
	}
}

// warmCaller is a prestartCaller with a workspace of its own whose plan
// is cached: its next spawn is a hit, except on cgroup v2 hosts, where
// nothing is cached (warmPrestart); hits says which.
func warmCaller(t *testing.T) (cfg spawnCfg, hits bool) {
	t.Helper()
	cfg = prestartCaller(t)
	res := filepath.Join(tempDir(t), "result.json")
	cfg.ws = newWorkspace(t)
	cfg.flags = []string{"--result", res}
	warmPrestart(t, cfg, res, "warm-up")
	b, err := os.ReadFile(res)
	return cfg, err == nil && strings.Contains(string(b), `"prestart": "hit"`)
}

// needStarter skips where no spawn prestarts, so no starter runs.
func needStarter(t *testing.T, hits bool) {
	t.Helper()
	if !hits {
		t.Skip("no prestart hits here (cgroup v2: the init cannot be adopted, so no plan is cached), so there is no starter to test")
	}
}

// orphanInits lists live processes named agentrun-init whose parent is not
// an agentrun CLI: an init outlives its CLI only by a bug. Zombies are
// dead; reaping them is the job of the host's PID 1, which here can take
// a second.
func orphanInits() []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, state, ppid, ok := procStat(e.Name())
		if !ok || comm != "agentrun-init" || state == "Z" || state == "X" {
			continue
		}
		parent, err := os.ReadFile(filepath.Join("/proc", ppid, "comm"))
		if err != nil || strings.TrimSpace(string(parent)) != "agentrun" {
			out = append(out, e.Name()+" (state "+state+", parent "+ppid+")")
		}
	}
	return out
}

// procStat reads the command name, state and parent pid from
// /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold spaces).
func procStat(pid string) (comm, state, ppid string, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "", "", "", false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", "", "", false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 {
		return "", "", "", false
	}
	return s[open+1 : end], f[0], f[1], true
}

// TestPrestartStarterKilled: the starter killed after it cloned the init
// leaves the spawn working (it falls back) and leaves no init behind as an
// unreaped child of the CLI while the sandbox runs.
func TestPrestartStarterKilled(t *testing.T) {
	catchStarters(t, 5, []string{"/bin/sleep", "0.4"}, awaitStarter, func(attempt int, run *running, starter int) bool {
		caught := starter > 0 && syscall.Kill(starter, syscall.SIGKILL) == nil
		time.Sleep(200 * time.Millisecond) // the sandbox's sleep runs
		if z := zombieChildren(run.pid()); len(z) > 0 {
			t.Errorf("attempt %d: the CLI holds unreaped children %v while its sandbox runs", attempt, z)
		}
		mustExit(t, run.wait(), 0, fmt.Sprintf("attempt %d, starter killed", attempt))
		return caught
	})
}

// catchStarters spawns command up to 30 times with a warm cache, until
// want of them had their starter caught: find looks for it under the CLI
// (0: missed) and act does the test's work on the spawn, saying whether
// it counts. It skips where no starter runs or none was ever caught.
func catchStarters(t *testing.T, want int, command []string, find func(cli int, guard time.Duration) int, act func(attempt int, run *running, starter int) bool) {
	t.Helper()
	cfg, hits := warmCaller(t)
	needStarter(t, hits)
	caught := 0
	for attempt := 0; attempt < 30 && caught < want; attempt++ {
		run := startSpawn(t, cfg, command...)
		if act(attempt, run, find(run.pid(), 200*time.Millisecond)) {
			caught++
		}
	}
	if caught == 0 {
		t.Skip("never caught the starter alive in 30 spawns; nothing was tested")
	}
}

// awaitStarter returns the starter once it has cloned the init: the CLI's
// child that is not in a PID namespace of its own, seen together with one
// that is (the init).
func awaitStarter(cli int, guard time.Duration) int {
	deadline := time.Now().Add(guard)
	for time.Now().Before(deadline) {
		starter, init := 0, 0
		for _, kid := range childrenOf(cli) {
			switch n := nsPids(kid); {
			case n == 1:
				starter = kid
			case n > 1:
				init = kid
			}
		}
		if starter > 0 && init > 0 {
			return starter
		}
	}
	return 0
}

// awaitChild returns the first child of cli whose NSpid count satisfies
// want, polling until guard.
func awaitChild(cli int, guard time.Duration, want func(nspids int) bool) int {
	deadline := time.Now().Add(guard)
	for time.Now().Before(deadline) {
		for _, kid := range childrenOf(cli) {
			if n := nsPids(kid); n > 0 && want(n) {
				return kid
			}
		}
	}
	return 0
}

// nsPids is the number of pids on pid's NSpid line (1: our PID namespace
// only), or 0.
func nsPids(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "NSpid:" {
			return len(f) - 1
		}
	}
	return 0
}

func childrenOf(pid int) []int {
	var kids []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
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
	return kids
}

// zombieChildren lists the children of pid that are zombies.
func zombieChildren(pid int) []int {
	var z []int
	for _, kid := range childrenOf(pid) {
		if _, state, _, ok := procStat(strconv.Itoa(kid)); ok && state == "Z" {
			z = append(z, kid)
		}
	}
	return z
}

// TestPrestartStarterStopped: a starter stopped (SIGSTOP) at any point
// cannot hold the CLI, not even while signals keep interrupting its wait
// (each would have restarted a per-call timeout).
func TestPrestartStarterStopped(t *testing.T) {
	starterOnly := func(cli int, guard time.Duration) int {
		return awaitChild(cli, guard, func(nspids int) bool { return nspids == 1 })
	}
	catchStarters(t, 3, []string{"/bin/true"}, starterOnly, func(attempt int, run *running, starter int) bool {
		if starter <= 0 || syscall.Kill(starter, syscall.SIGSTOP) != nil {
			run.wait()
			return false
		}
		// SIGWINCH, which the CLI forwards and the command ignores, until
		// the CLI is done; the hang guard is generous and no timing claim.
		guard := time.After(20 * time.Second)
	poke:
		for {
			select {
			case <-run.done:
				break poke
			case <-guard:
				t.Errorf("attempt %d: a stopped starter held the CLI for 20 s", attempt)
				break poke
			case <-time.After(50 * time.Millisecond):
				_ = syscall.Kill(run.pid(), syscall.SIGWINCH)
			}
		}
		_ = syscall.Kill(starter, syscall.SIGKILL)
		_ = syscall.Kill(starter, syscall.SIGCONT)
		mustExit(t, run.wait(), 0, fmt.Sprintf("attempt %d, starter stopped", attempt))
		return true
	})
}

// TestStateNotWritableFromSandbox: agentrun's state (cached plans, express
// records, compiled filters) steers later spawns, which run what it holds
// without the Go side compiling again, and the plans hold other spawns'
// environments. So no sandbox may see it: a workspace or bind that holds
// it, or lies in it, is refused before anything runs, whichever of the
// caller's state roots it is (another session of the same user may use
// another).
func TestStateNotWritableFromSandbox(t *testing.T) {
	t.Parallel()
	cfg := spawnCfg{}
	state := "/run/agentrun"
	if !isRoot() {
		xdg := privateDir(t, os.Geteuid(), os.Getegid())
		cfg.env = []string{"XDG_RUNTIME_DIR=" + xdg}
		state = filepath.Join(xdg, "agentrun")
	}
	cfg.ws = newWorkspace(t)
	mustExit(t, spawn(t, cfg, "/bin/true"), 0, "a spawn that makes the state directory")
	if !exists(state) {
		t.Fatalf("no state directory at %s after a spawn", state)
	}
	// refused runs a spawn that tries to plant a file in state through dir
	// (its path in the sandbox) and expects the refusal.
	refused := func(t *testing.T, c spawnCfg, state, dir string) {
		t.Helper()
		planted := filepath.Join(state, "planted-by-sandbox")
		r := spawn(t, c, "/bin/sh", "-c", "mkdir -p "+dir+" && echo planted > "+dir+"/planted-by-sandbox")
		if exists(planted) {
			_ = os.Remove(planted)
			t.Fatalf("SANDBOX ESCAPE: the sandbox wrote into agentrun's state at %s, which later spawns trust:\n%s", state, r)
		}
		mustExit(t, r, 125, "a sandbox with agentrun's state bound")
		if !strings.Contains(r.stderr, state) {
			t.Errorf("the refusal does not name the state directory %s:\n%s", state, r)
		}
	}
	t.Run("--rw of the state", func(t *testing.T) {
		c := cfg
		c.flags = []string{"--rw", state + ":/mnt/state"}
		refused(t, c, state, "/mnt/state")
	})
	t.Run("--rw of a directory holding it", func(t *testing.T) {
		c := cfg
		c.flags = []string{"--rw", filepath.Dir(state) + ":/mnt/up"}
		refused(t, c, state, "/mnt/up/"+filepath.Base(state))
	})
	t.Run("--ro of the state", func(t *testing.T) {
		// Cached plans hold the environments of other spawns, --env
		// values included.
		c := cfg
		c.flags = []string{"--ro", state + ":/mnt/state"}
		r := spawn(t, c, "/bin/sh", "-c", "cat /mnt/state/prestart/* >/dev/null 2>&1; ls /mnt/state")
		mustExit(t, r, 125, "a sandbox with agentrun's state bound read-only")
	})
	t.Run("a workspace holding it", func(t *testing.T) {
		if isRoot() {
			refused(t, spawnCfg{ws: "/run"}, state, "/workspace/agentrun")
			return
		}
		ws := newWorkspace(t)
		xdg := filepath.Join(ws, "run")
		if err := os.Mkdir(xdg, 0o700); err != nil {
			t.Fatal(err)
		}
		c := spawnCfg{ws: ws, env: []string{"XDG_RUNTIME_DIR=" + xdg}}
		refused(t, c, filepath.Join(xdg, "agentrun"), "/workspace/run/agentrun")
	})
	t.Run("another session's root", func(t *testing.T) {
		if isRoot() {
			t.Skip("root has one state root, /run/agentrun (and its templates)")
		}
		// This session has $XDG_RUNTIME_DIR; one without it keeps its
		// state in /tmp/agentrun-UID, which this one must guard too.
		other := filepath.Join("/tmp", "agentrun-"+strconv.Itoa(os.Geteuid()))
		if err := os.Mkdir(other, 0o700); err == nil {
			t.Cleanup(func() { removeAll(t, other) })
		} else if !os.IsExist(err) {
			t.Fatal(err)
		}
		c := cfg
		c.flags = []string{"--rw", other + ":/mnt/other"}
		refused(t, c, other, "/mnt/other/seccomp")
	})
	t.Run("the state under another path", func(t *testing.T) {
		// A bind mount of the state, or of a directory above it, shows
		// the same directories under another path: refused by device
		// and inode. The mount is made in a mount namespace of the
		// spawn's own, which goes with it.
		if !isRoot() {
			t.Skip("needs root: the test makes the other path with a bind mount")
		}
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("needs unshare(1) (util-linux) to make the bind mount in a namespace of its own")
		}
		run := func(src, dest, dir string) (int, string) {
			alias := tempDir(t)
			cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
				`mount --bind "$1" "$2" && exec "$3" spawn --workspace "$4" --rw "$2:$5" -- /bin/sh -c "mkdir -p $6 && echo planted > $6/planted-by-sandbox"`,
				"sh", src, alias, agentrunBin, cfg.ws, dest, dir)
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("unshare: %v\n%s", err, out)
			}
			return code, string(out)
		}
		for _, c := range []struct{ name, src, dest, dir string }{
			{"a bind mount of the state", state, "/mnt/alias", "/mnt/alias"},
			{"a bind mount of the directory above it", filepath.Dir(state), "/mnt/up", "/mnt/up/" + filepath.Base(state)},
		} {
			code, out := run(c.src, c.dest, c.dir)
			planted := filepath.Join(state, "planted-by-sandbox")
			if exists(planted) {
				_ = os.Remove(planted)
				t.Fatalf("SANDBOX ESCAPE: through %s the sandbox wrote into agentrun's state:\n%s", c.name, out)
			}
			if code != 125 || !strings.Contains(out, state) {
				t.Errorf("%s: exit %d, want 125 and the state directory %s named:\n%s", c.name, code, state, out)
			}
		}
		// Control: a bind mount of another directory works the same way.
		other := tempDir(t)
		if code, out := run(other, "/mnt/other", "/mnt/other"); code != 0 || !exists(filepath.Join(other, "planted-by-sandbox")) {
			t.Errorf("a bind mount of an unrelated directory: exit %d, want 0 and the write landed:\n%s", code, out)
		}
	})
	t.Run("binds elsewhere are fine", func(t *testing.T) {
		c := cfg
		c.flags = []string{"--ro", tempDir(t) + ":/mnt/elsewhere"}
		mustExit(t, spawn(t, c, "/bin/sh", "-c", "echo ok > /workspace/elsewhere-ok"), 0, "a bind that does not hold the state")
		if b, err := os.ReadFile(filepath.Join(cfg.ws, "elsewhere-ok")); err != nil || string(b) != "ok\n" {
			t.Errorf("workspace write did not land: %q %v", b, err)
		}
	})
}
