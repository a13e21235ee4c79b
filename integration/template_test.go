//go:build linux

package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A root template (mounts/template_linux.go) is the fixed part of the root,
// kept in the state directory and bound read-only as the root of every
// sandbox with the same policy and host files. These tests attack it from
// inside, hold it from outside, and change the host files it copies.

// templateEnv returns what a spawn needs to use a root template, and where
// this user's templates are: as root /run/agentrun-templates; rootless
// the state directory in $XDG_RUNTIME_DIR, here a private one of the
// test's (the fallback state directory in /tmp gets no template, since
// cleaners age files there).
func templateEnv(t *testing.T) ([]string, string) {
	env, dir, _ := templateDirs(t)
	return env, dir
}

// templateDirs is templateEnv, and the directory of the templates' locks.
func templateDirs(t *testing.T) (env []string, dir, locks string) {
	t.Helper()
	if isRoot() {
		return nil, "/run/agentrun-templates", "/run/agentrun/template-locks"
	}
	x, err := os.MkdirTemp("", "agentrun-it-xdg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(t, x) })
	return []string{"XDG_RUNTIME_DIR=" + x}, filepath.Join(x, "agentrun", "templates"), filepath.Join(x, "agentrun", "template-locks")
}

// rootLine prints the sandbox's "/" line of /proc/self/mountinfo: the
// mount's root within its filesystem ("/" for a tmpfs of its own) and the
// filesystem type.
const rootLine = `awk '$5 == "/" { for (i = 7; $i != "-"; i++) ; print "ROOT", $4, $(i+1) }' /proc/self/mountinfo`

func rootOf(t *testing.T, out string) (src, fstype string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "ROOT" {
			return f[1], f[2]
		}
	}
	t.Fatalf("no root line in the sandbox's output:\n%s", out)
	return "", ""
}

// templateIn asserts that the sandbox's root is a template of dir and
// returns the template's path on the host.
func templateIn(t *testing.T, r runResult, dir string) string {
	t.Helper()
	src, fstype := rootOf(t, r.stdout)
	name := filepath.Base(src)
	if src == "/" || len(name) != 32 || !exists(filepath.Join(dir, name)) {
		t.Fatalf("the root is %s (%s), not a template of %s\n%s", src, fstype, dir, r)
	}
	return filepath.Join(dir, name)
}

// TestRootTemplate: a sandbox on a template works (exit codes, workspace
// writes, the host's /etc content), and nothing in it can write to the
// template, which every other sandbox shares.
func TestRootTemplate(t *testing.T) {
	env, dir := templateEnv(t)
	ws := newWorkspace(t)
	cfg := spawnCfg{ws: ws, env: env}
	r := spawn(t, cfg, "/bin/sh", "-c", rootLine+`; cat /etc/passwd > /workspace/passwd; echo landed > /workspace/out; exit 7`)
	mustExit(t, r, 7, "exit 7 on a root template")
	tmpl := templateIn(t, r, dir)
	if b, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(b) != "landed\n" {
		t.Errorf("workspace write did not land: %q, %v", b, err)
	}
	if sha256File(t, filepath.Join(ws, "passwd")) != sha256File(t, "/etc/passwd") {
		t.Error("the sandbox's /etc/passwd differs from the host's")
	}
	before := map[string]string{}
	for _, f := range []string{"etc/passwd", "etc/hosts", "etc/group"} {
		if exists(filepath.Join(tmpl, f)) {
			before[f] = sha256File(t, filepath.Join(tmpl, f))
		}
	}
	if len(before) == 0 {
		t.Fatalf("the template %s holds none of the /etc copies", tmpl)
	}

	attacks := []struct {
		what string
		args []string
	}{
		{"create a file in /", []string{"write", "/agentrun-new", "x"}},
		{"create a file in /etc", []string{"write", "/etc/agentrun-new", "x"}},
		{"overwrite /etc/passwd", []string{"exe-write", "/etc/passwd"}},
		{"chmod /etc/passwd", []string{"chmod", "/etc/passwd"}},
		{"unlink /etc/passwd", []string{"unlink", "/etc/passwd"}},
		{"chown, truncate, utimes, link or rename /etc/passwd", []string{"meta", "/etc/passwd"}},
		{"chmod /", []string{"chmod", "/"}},
		{"remount / read-write", []string{"mountop", "remount-rw", "/"}},
		{"mount_setattr / read-write", []string{"mountop", "setattr-rw", "/"}},
		{"remount / read-write from a nested user namespace", []string{"mountop", "-userns", "-mountns", "remount-rw", "/"}},
	}
	for _, a := range attacks {
		r := spawn(t, cfg, append([]string{"/workspace/attacker"}, a.args...)...)
		mustBlock(t, r, a.what)
	}
	// The sandboxes above ran on the same template, and it is as it was.
	r = spawn(t, cfg, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "a spawn after the attacks")
	if again := templateIn(t, r, dir); again != tmpl {
		t.Errorf("the attacks' sandboxes made another template: %s, then %s", tmpl, again)
	}
	for f, sum := range before {
		if got := sha256File(t, filepath.Join(tmpl, f)); got != sum {
			t.Errorf("SANDBOX ESCAPE: the shared template's %s changed", f)
		}
	}
	if exists(filepath.Join(tmpl, "agentrun-new")) || exists(filepath.Join(tmpl, "etc/agentrun-new")) {
		t.Error("SANDBOX ESCAPE: a file was created in the shared template")
	}

	// The opt-out holds on every path, a prestart (or express) hit of a
	// plan cached with the template included: the spawns above warmed it.
	off := cfg
	off.env = append(append([]string(nil), env...), "AGENTRUN_TEMPLATE=0")
	for i := range 2 {
		r := spawn(t, off, "/bin/sh", "-c", rootLine)
		mustExit(t, r, 0, "a spawn with AGENTRUN_TEMPLATE=0")
		if src, fstype := rootOf(t, r.stdout); src != "/" || fstype != "tmpfs" {
			t.Errorf("spawn %d with AGENTRUN_TEMPLATE=0 got the root %s (%s)", i+1, src, fstype)
		}
	}
}

// TestRootTemplateCopiesBigEtcFiles: an /etc file too big to copy into
// every fresh root (over 16 KiB) is bound there, but copied into a root
// template once: the sandbox on a template sees the host's content with
// no mount for it, one without a template a read-only bind.
func TestRootTemplateCopiesBigEtcFiles(t *testing.T) {
	const f = "/etc/mime.types" // media-types, which .ci/setup.sh installs
	fi, err := os.Stat(f)
	if err != nil || fi.Size() <= 16<<10 || fi.Size() > 256<<10 || fi.Mode().Perm()&0o004 == 0 {
		t.Skipf("needs a world-readable %s of 16-256 KiB (Debian's media-types): %v", f, err)
	}
	env, dir := templateEnv(t)
	ws := newWorkspace(t)
	cfg := spawnCfg{ws: ws, env: env}
	script := rootLine + `; awk '$5 == "` + f + `"' /proc/self/mountinfo | wc -l; cat ` + f + ` > /workspace/copy`
	r := spawn(t, cfg, "/bin/sh", "-c", script)
	mustExit(t, r, 0, "a spawn on a root template")
	tmpl := templateIn(t, r, dir)
	if n := strings.Fields(r.stdout); len(n) == 0 || n[len(n)-1] != "0" {
		t.Errorf("%s is still a mount on a template:\n%s", f, r)
	}
	if !exists(filepath.Join(tmpl, f)) {
		t.Errorf("the template %s holds no copy of %s", tmpl, f)
	}
	if sha256File(t, filepath.Join(ws, "copy")) != sha256File(t, f) {
		t.Errorf("the sandbox's %s differs from the host's", f)
	}
	off := cfg
	off.env = append(append([]string(nil), env...), "AGENTRUN_TEMPLATE=0")
	r = spawn(t, off, "/bin/sh", "-c", script)
	mustExit(t, r, 0, "a spawn without a template")
	if n := strings.Fields(r.stdout); len(n) == 0 || n[len(n)-1] != "1" {
		t.Errorf("without a template %s must be one read-only bind:\n%s", f, r)
	}
	if sha256File(t, filepath.Join(ws, "copy")) != sha256File(t, f) {
		t.Errorf("the sandbox's %s differs from the host's without a template", f)
	}
}

// TestRootTemplateNotForAdmin: a sandbox that keeps CAP_SYS_ADMIN could
// remount a shared root read-write, so it gets a root of its own.
func TestRootTemplateNotForAdmin(t *testing.T) {
	env, dir := templateEnv(t)
	ws := newWorkspace(t)
	r := spawn(t, spawnCfg{ws: ws, env: env, flags: []string{"--cap-add", "SYS_ADMIN"}}, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "a spawn with CAP_SYS_ADMIN")
	if src, fstype := rootOf(t, r.stdout); src != "/" || fstype != "tmpfs" {
		t.Fatalf("a sandbox with CAP_SYS_ADMIN got the root %s (%s), not a tmpfs of its own (templates in %s)", src, fstype, dir)
	}
}

// TestRootTemplateHeldByOther: the templates' locks are the caller's own
// (another user cannot open them, even where root's templates may be
// entered by anyone), and a lock held exclusively by the caller's own
// processes slows spawns down at most: they build their root in a tmpfs
// instead, at once.
func TestRootTemplateHeldByOther(t *testing.T) {
	env, dir, locks := templateDirs(t)
	ws := newWorkspace(t)
	cfg := spawnCfg{ws: ws, env: env, guard: 30 * time.Second}
	r := spawn(t, cfg, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "a spawn on a template")
	tmpl := templateIn(t, r, dir)
	lock := filepath.Join(locks, filepath.Base(tmpl)+".lock")

	if isRoot() {
		if u := testUser(t); u == nil {
			t.Logf("no test user (%s): another user's access was not tried", envTestUser)
		} else {
			cmd := exec.Command("flock", "-n", "-x", lock, "true")
			cmd.SysProcAttr = credential(t, u)
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("user %s took the exclusive lock of root's template %s: %s", u.Username, lock, out)
			}
			cmd = exec.Command("ls", dir)
			cmd.SysProcAttr = credential(t, u)
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("user %s listed root's templates: %s", u.Username, out)
			}
		}
	}

	fd, err := unix.Open(lock, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// Twice: the first is a prestart hit of the plan the spawn above
	// cached, whose start (start_core) takes the lock itself; the second runs the
	// plan the first cached, without a template.
	for i := range 2 {
		r := spawn(t, cfg, "/bin/sh", "-c", rootLine+"; echo landed > /workspace/held")
		mustExit(t, r, 0, fmt.Sprintf("spawn %d while another holds the template", i+1))
		if src, fstype := rootOf(t, r.stdout); src != "/" || fstype != "tmpfs" {
			t.Errorf("spawn %d used the template %s another holds exclusively (%s)", i+1, src, fstype)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "held")); err != nil {
		t.Error("the workspace write of a spawn without the template did not land")
	}
}

// TestRootTemplateSweep: a template a sandbox uses is never removed under
// it, even when a newer one replaced it long ago; once unused it is.
func TestRootTemplateSweep(t *testing.T) {
	env, dir, locks := templateDirs(t)
	ws := newWorkspace(t)
	// A, where the express path applies, is an express spawn: only its
	// init holds the lock then (the CLI never starts Go).
	trace := filepath.Join(tempDir(t), "trace")
	acfg := spawnCfg{ws: ws, env: append(append([]string(nil), env...), "AGENTRUN_EXPRESS_TRACE="+trace)}
	for range 2 {
		mustExit(t, spawn(t, acfg, "/bin/true"), 0, "a warm-up spawn")
	}
	// A: writes its root line, waits (at most a minute) for the go file,
	// then reads its copies.
	a := startSpawn(t, acfg, "/bin/sh", "-c",
		rootLine+` > /workspace/root.tmp; mv /workspace/root.tmp /workspace/root
i=0; while [ ! -e /workspace/go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; cat /etc/passwd > /workspace/after`)
	// Whatever fails below, A must not outlive the test: a live sandbox
	// changes what later tests see (TestExpress's cgroups).
	t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		<-a.done
	})
	var held string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(ws, "root")); err == nil {
			held = templateIn(t, runResult{stdout: string(b)}, dir)
			break
		}
	}
	if held == "" {
		_ = os.WriteFile(filepath.Join(ws, "go"), nil, 0o644)
		t.Fatalf("sandbox A never became ready:\n%s", a.wait())
	}
	if expressHere() {
		if tr, _ := os.ReadFile(trace); !strings.HasSuffix(strings.TrimSpace(string(tr)), "express: used") {
			t.Errorf("sandbox A did not take the express path: %q", tr)
		}
	}
	// Last used long ago, as far as a sweep can tell.
	old := time.Now().Add(-24 * time.Hour)
	if err := os.Chtimes(filepath.Join(locks, filepath.Base(held)+".lock"), old, old); err != nil {
		t.Fatal(err)
	}
	// Policies with other mount points build other templates, and each
	// build sweeps.
	extra := func(name string) []string {
		d := filepath.Join(tempDir(t), name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return []string{"--ro", d + ":/opt/" + name}
	}
	r := spawn(t, spawnCfg{ws: newWorkspace(t), env: env, flags: extra(token("b-"))}, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "sandbox B")
	b := templateIn(t, r, dir)
	if b == held {
		t.Fatal("sandbox B, with another mount point, shares A's template")
	}
	// B's and C's policies are this test's own: so are their templates.
	t.Cleanup(func() { removeAll(t, b) })
	if !exists(held) {
		t.Fatal("SANDBOX BROKEN: the template of a running sandbox was swept")
	}
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ra := a.wait()
	mustExit(t, ra, 0, "sandbox A after the sweep")
	if b, err := os.ReadFile(filepath.Join(ws, "after")); err != nil || len(b) == 0 {
		t.Errorf("sandbox A could not read its /etc/passwd after the sweep: %q, %v", b, err)
	}

	r = spawn(t, spawnCfg{ws: newWorkspace(t), env: env, flags: extra(token("c-"))}, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "sandbox C")
	t.Cleanup(func() { removeAll(t, templateIn(t, r, dir)) })
	if exists(held) {
		t.Errorf("the template %s, unused and replaced a day ago, was not swept; open in: %v", held, holders(held))
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left in %s: %s", dir, e.Name())
		}
	}
}

// TestRootTemplateFollowsHostFiles: a host file the template copied is
// rewritten in place, with the same size and modification time; the next
// spawn, the express path included, shows the new content. The host file
// is replaced in a private mount namespace around agentrun.
func TestRootTemplateFollowsHostFiles(t *testing.T) {
	if !isRoot() {
		t.Skip("needs root: replaces a host /etc file in a private mount namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1) on this host")
	}
	target := copiedEtcFile(t)
	dir := tempDir(t)
	file := filepath.Join(dir, "etc-file")
	v1, v2 := token("agentrun-template-one-"), token("agentrun-template-two-")
	v2 = v2[:len(v1)]
	writeFile(t, file, v1+"\n", 0o644)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	// Settled: a template is only built from files that did not change in
	// the last two seconds.
	time.Sleep(2100 * time.Millisecond)
	ws := newWorkspace(t)
	trace := filepath.Join(dir, "trace")
	script := `set -u; mount --bind "$1" "$2" || exit 90
for i in 1 2 3; do "$3" spawn --workspace "$4" -- cat "$2" || exit 91; done
printf '%s\n' "$5" | dd of="$1" conv=notrunc status=none || exit 92
touch -d "$6" "$1" || exit 93
echo ---
"$3" spawn --workspace "$4" -- cat "$2" || exit 94
sleep 2.1
"$3" spawn --workspace "$4" -- cat "$2" || exit 95
"$3" spawn --workspace "$4" -- cat "$2" || exit 96`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
		file, target, agentrunBin, ws, v2, fi.ModTime().Format(time.RFC3339Nano))
	cmd.Env = append(os.Environ(), "AGENTRUN_EXPRESS_TRACE="+trace)
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	before, after, _ := strings.Cut(string(out), "---\n")
	if strings.Count(before, v1) != 3 {
		t.Errorf("before the change the sandboxes showed:\n%s", before)
	}
	// The first right after the change (too fresh for a template), two
	// more once it settled (a new template).
	if strings.Count(after, v2) != 3 || strings.Contains(after, v1) {
		t.Errorf("STALE: after %s changed in place, the sandboxes showed:\n%s", target, after)
	}
	// Where the express path applies, it must have run before the change,
	// or this did not test it.
	if tr, _ := os.ReadFile(trace); expressHere() && !strings.Contains(string(tr), "express: used") {
		t.Errorf("the express path never ran, so it was not tested: %q", tr)
	}
}

// holders lists the processes with an fd open on p, for failure messages.
func holders(p string) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		fds, _ := os.ReadDir(filepath.Join("/proc", d.Name(), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", d.Name(), "fd", fd.Name())); l == p {
				cmd, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
				out = append(out, d.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
			}
		}
	}
	return out
}

// expressHere: the express path applies to this run's root spawns
// (expressCaller's conditions).
func expressHere() bool {
	return isRoot() && exists("/sys/fs/cgroup/pids/tasks")
}

// TestRootTemplateNotWritable: a writable bind that holds the templates is
// refused, as is any that holds agentrun's state
// (TestStateNotWritableFromSandbox): a sandbox could otherwise write to
// every other sandbox's root. A caller whose templates would be reached
// through a symlink, which the init refuses to follow, gets a root of its
// own and spawns fine.
func TestRootTemplateNotWritable(t *testing.T) {
	env, dir := templateEnv(t)
	ws := newWorkspace(t)
	r := spawn(t, spawnCfg{ws: ws, env: env}, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "a spawn on a template")
	templateIn(t, r, dir)
	r = spawn(t, spawnCfg{ws: ws, env: env, flags: []string{"--rw", dir + ":/mnt/templates"}}, "/bin/sh", "-c", rootLine+"; ls /mnt/templates >/dev/null")
	if r.code != 125 || !strings.Contains(r.stderr, "a bind of "+dir) {
		if r.code == 0 {
			if src, fstype := rootOf(t, r.stdout); src != "/" || fstype != "tmpfs" {
				t.Errorf("SANDBOX ESCAPE: a sandbox that can write to the templates got the shared root %s (%s)", src, fstype)
			}
		}
		t.Errorf("a read-write bind of the templates was not refused:\n%s", r)
	}

	if isRoot() {
		return // root's templates are in /run, whatever XDG_RUNTIME_DIR says
	}
	base := tempDir(t)
	if err := os.Mkdir(filepath.Join(base, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(base, "real", "xdg"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	r = spawn(t, spawnCfg{ws: ws, env: []string{"XDG_RUNTIME_DIR=" + filepath.Join(base, "link", "xdg")}}, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "a spawn with a symlink in XDG_RUNTIME_DIR")
	if src, _ := rootOf(t, r.stdout); src != "/" {
		t.Errorf("the init was given a template through a symlinked path: %s", src)
	}
}

// TestRootTemplateExpressKeepsLastUse: a sweep removes templates whose
// last use is old, and spawns on the express path never reach Go, so
// the constructor records the use too. Without that, a runner whose
// every spawn is an express one would see its template swept as idle and
// rebuilt every ten minutes.
func TestRootTemplateExpressKeepsLastUse(t *testing.T) {
	expressCaller(t)
	_, dir, locks := templateDirs(t)
	ws := newWorkspace(t)
	cfg := spawnCfg{ws: ws}
	warmExpress(t, cfg)
	r, _ := expressSpawn(t, cfg, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "print the root")
	lock := filepath.Join(locks, filepath.Base(templateIn(t, r, dir))+".lock")
	old := time.Now().Add(-5 * time.Minute)
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	r, said := expressSpawn(t, cfg, "/bin/true")
	mustExit(t, r, 0, "an express spawn")
	if said != "used" {
		t.Fatalf("express path not taken: %q\n%s", said, r)
	}
	fi, err := os.Stat(lock)
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(fi.ModTime()); age > time.Minute {
		t.Errorf("the template's last use is %v old after an express spawn on it; a sweep would take it for idle", age.Round(time.Second))
	}
	// The touch is no input of the plan: the next spawn is express too.
	if r, said := expressSpawn(t, cfg, "/bin/true"); said != "used" {
		t.Errorf("express path not taken after the last use was recorded: %q\n%s", said, r)
	}
}

// TestRootTemplateNoExpressWithoutIt: a spawn that gets no template for a
// passing reason (here a lock someone else holds) runs on a tmpfs root,
// and its plan must not become the express record: that would keep every
// later spawn with the same flags on the slower tmpfs root. Once the lock
// is free, the express path runs on the template.
func TestRootTemplateNoExpressWithoutIt(t *testing.T) {
	expressCaller(t)
	_, dir, locks := templateDirs(t)
	ws := newWorkspace(t)
	cfg := spawnCfg{ws: ws}
	r, _ := expressSpawn(t, cfg, "/bin/sh", "-c", rootLine)
	mustExit(t, r, 0, "print the root")
	lock := filepath.Join(locks, filepath.Base(templateIn(t, r, dir))+".lock")
	f, err := os.Open(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		r, said := expressSpawn(t, cfg, "/bin/sh", "-c", rootLine)
		mustExit(t, r, 0, "a spawn while the template's lock is held")
		if src, fstype := rootOf(t, r.stdout); src != "/" || fstype != "tmpfs" {
			t.Fatalf("spawn %d ran on %s (%s) while the template's lock was held", i, src, fstype)
		}
		if said == "used" {
			t.Fatalf("spawn %d took the express path on a tmpfs root: the record came from a spawn without its template", i)
		}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		r, said := expressSpawn(t, cfg, "/bin/sh", "-c", rootLine)
		mustExit(t, r, 0, "a spawn with the lock free")
		if said == "used" {
			templateIn(t, r, dir)
			return
		}
	}
	t.Errorf("no express spawn within four after the lock was freed")
}
