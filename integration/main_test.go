//go:build linux

package integration

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Binaries under test, set by TestMain.
var (
	// agentrunBin is the agentrun binary: $AGENTRUN_BIN or a fresh build.
	agentrunBin string
	// attackerBin is the static attack helper: $AGENTRUN_ATTACKER or a
	// fresh build of ./internal/attacker.
	attackerBin string
)

const (
	envBin      = "AGENTRUN_BIN"
	envAttacker = "AGENTRUN_ATTACKER"
	// envTestUser names the unprivileged account that root-run tests use
	// for their rootless variants (default "artest"; "-" disables them).
	envTestUser = "AGENTRUN_TEST_USER"
	// envVia selects how the harness runs a sandbox: "spawn" (the
	// default) or "session", where every spawn of the harness becomes
	// create, exec and delete of a session (via_session_test.go).
	envVia = "AGENTRUN_IT_VIA"
)

// sandboxPath is PATH for agentrun and therefore for the command: the host
// system directories only, whatever the caller's PATH (pyenv shims, $HOME
// tool dirs) holds.
const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// underFilterEnv, when set, makes the test binary a launcher: it loads a
// seccomp filter that allows everything, as a container runtime would,
// and execs the agentrun binary the variable names with its own arguments
// (TestUnderOuterFilter).
const underFilterEnv = "AGENTRUN_IT_EXEC_UNDER_FILTER"

// underFilterDenyEnv, set with underFilterEnv, makes the launcher's filter
// fail one system call with EPERM: "capbset-drop" for prctl(PR_CAPBSET_DROP)
// (the sandbox's init then fails at its first step,
// TestEarlyInitFailureReported), "mount-setattr" for mount_setattr (the
// idmap of the workspace then fails after the init's clone,
// TestExpressStartFailsAfterClone).
const underFilterDenyEnv = "AGENTRUN_IT_FILTER_DENY"

func TestMain(m *testing.M) {
	if bin := os.Getenv(underFilterEnv); bin != "" {
		execUnderFilter(bin)
	}
	os.Exit(testMain(m))
}

// denyFilter fails system call nr (amd64), when its first argument's low
// half is *arg0 if arg0 is set, with EPERM, and allows everything else.
func denyFilter(nr uint32, arg0 *uint32) []unix.SockFilter {
	const ld, jeq, ret = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_RET | unix.BPF_K
	var args []unix.SockFilter
	if arg0 != nil {
		args = []unix.SockFilter{{Code: ld, K: 16}, {Code: jeq, K: *arg0, Jf: 1}}
	}
	skip := uint8(3 + len(args)) // from the arch test to the last instruction
	f := []unix.SockFilter{
		{Code: ld, K: 4}, // arch
		{Code: jeq, K: unix.AUDIT_ARCH_X86_64, Jf: skip},
		{Code: ld, K: 0}, // nr
		{Code: jeq, K: nr, Jf: skip - 2},
	}
	f = append(f, args...)
	return append(f, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW})
}

func execUnderFilter(bin string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "integration: exec under a filter:", err)
		os.Exit(125)
	}
	// The filter and no_new_privs belong to this thread, which execs.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(err)
	}
	filter := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	switch os.Getenv(underFilterDenyEnv) {
	case "":
	case "mount-setattr":
		filter = denyFilter(unix.SYS_MOUNT_SETATTR, nil)
	case "capbset-drop":
		arg0 := uint32(unix.PR_CAPBSET_DROP)
		filter = denyFilter(unix.SYS_PRCTL, &arg0)
	default:
		fail(fmt.Errorf("%s=%q: no such filter", underFilterDenyEnv, os.Getenv(underFilterDenyEnv)))
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
		fail(e)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, underFilterEnv+"=") && !strings.HasPrefix(kv, underFilterDenyEnv+"=") {
			env = append(env, kv)
		}
	}
	fail(syscall.Exec(bin, append([]string{bin}, os.Args[1:]...), env))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "agentrun-integration-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	// Root-run tests start rootless variants as another user: the binaries
	// must be reachable by it.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 2
	}
	if agentrunBin, err = binary(envBin, "agentrun", "./cmd/agentrun", filepath.Join(dir, "agentrun")); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 2
	}
	if attackerBin, err = binary(envAttacker, "agentrun-attacker", "./integration/internal/attacker", filepath.Join(dir, "attacker")); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 2
	}
	switch v := os.Getenv(envVia); v {
	case "", "spawn":
	case "session":
		viaSession = true
		cleanup, err := setupViaSession()
		if err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 2
		}
		defer cleanup()
	default:
		fmt.Fprintf(os.Stderr, "integration: $%s=%q: want spawn or session\n", envVia, v)
		return 2
	}
	via := "spawn"
	if viaSession {
		via = "session (create, exec, delete)"
	}
	fmt.Fprintf(os.Stderr, "integration: agentrun=%s attacker=%s uid=%d via=%s\n", agentrunBin, attackerBin, os.Geteuid(), via)
	return m.Run()
}

// binary finds a binary the suite needs, in this order: the path in $env;
// a static build of pkg (relative to the module root) into out, when the
// module source and a Go toolchain are at hand; a file named sibling next to
// the test binary (how a prebuilt suite is shipped into a VM that has no Go
// toolchain).
func binary(env, sibling, pkg, out string) (string, error) {
	if p := os.Getenv(env); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("$%s: %w", env, err)
		}
		return abs, nil
	}
	root, rootErr := moduleRoot()
	goTool, goErr := exec.LookPath("go")
	if rootErr == nil && goErr == nil {
		cmd := exec.Command(goTool, "build", "-trimpath", "-o", out, pkg)
		cmd.Dir = root
		// agentrun needs cgo (libseccomp, the C init); the attacker must be
		// static to run inside the sandbox without the host's loader.
		cgo := "CGO_ENABLED=0"
		if strings.HasSuffix(pkg, "/cmd/agentrun") {
			cgo = "CGO_ENABLED=1"
		}
		cmd.Env = append(os.Environ(), cgo)
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", pkg, err, b)
		}
		return out, os.Chmod(out, 0o755)
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), sibling)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	why := rootErr
	if why == nil {
		why = errors.New("no go toolchain")
	}
	return "", fmt.Errorf("cannot build %s (%v): set $%s to a prebuilt binary, or put one named %s next to the test binary (and likewise $%s)", pkg, why, env, sibling, otherEnv(env))
}

func otherEnv(env string) string {
	if env == envBin {
		return envAttacker
	}
	return envBin
}

// moduleRoot finds the agentrun module from the working directory, which
// `go test` sets to this package's directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/agentrun/agentrun\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the agentrun module above the working directory")
		}
		dir = parent
	}
}

// ---------------------------------------------------------------------------
// Temporary directories and files

// tempDir is a fresh directory, mode 0755 and owned by the running user,
// whose ancestors every user can traverse (t.TempDir's per-test parent is
// 0700, which a rootless variant run as another user could not enter).
func tempDir(t *testing.T) string {
	t.Helper()
	// Most tests make their first directory before anything else: a test
	// that cannot run through a session stops here, before its host setup.
	skipViaSession(t)
	d, err := os.MkdirTemp("", "agentrun-it-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(t, d) })
	return d
}

// removeAll removes d even when a sandbox left read-only directories in it.
func removeAll(t *testing.T, d string) {
	_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(d); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// newWorkspace is a fresh workspace holding a copy of the attacker at
// /workspace/attacker.
func newWorkspace(t *testing.T) string {
	t.Helper()
	ws := tempDir(t)
	copyFile(t, attackerBin, filepath.Join(ws, "attacker"), 0o755)
	return ws
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	// No fork while dst is open for writing (see writeFile).
	syscall.ForkLock.RLock()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err == nil {
		_, err = io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	// A fork by a parallel test while the file is open for writing would
	// hold the fd until its exec, and executing the file then fails with
	// ETXTBSY ("text file busy"); os/exec forks with ForkLock held for
	// writing.
	syscall.ForkLock.RLock()
	err := os.WriteFile(p, []byte(data), mode)
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// token is a random marker for secrets and process names.
func token(prefix string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b)
}

// listDir returns the sorted names in d ("" entries for a missing dir).
func listDir(t *testing.T, d string) []string {
	t.Helper()
	ents, err := os.ReadDir(d)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func isRoot() bool { return os.Geteuid() == 0 }

func needRoot(t *testing.T) {
	t.Helper()
	if !isRoot() {
		t.Skip("needs root: exercises the root-mode idmapping")
	}
}

// ---------------------------------------------------------------------------
// Running agentrun

// spawnCfg describes one agentrun invocation.
type spawnCfg struct {
	// ws is passed as --workspace when set.
	ws string
	// flags are extra spawn flags (before "--").
	flags []string
	// env is added to agentrun's own environment (PATH and LANG are set).
	env   []string
	stdin io.Reader
	// extraFiles become fds 3, 4, ... of agentrun.
	extraFiles []*os.File
	// bin overrides the agentrun binary.
	bin string
	// dir is agentrun's working directory.
	dir string
	// sys overrides the process attributes (credentials, controlling tty).
	sys *syscall.SysProcAttr
	// traceDir is where expressSpawn writes its trace: a fresh directory
	// when empty, which a rootless caller could not write.
	traceDir string
	// stdout/stderr, when set, receive the output instead of the buffers.
	stdout, stderr io.Writer
	// guard is the hang guard (default 60 s): past it the run is killed
	// and the test fails. It is not a performance assertion.
	guard time.Duration
}

// runResult is a finished agentrun invocation.
type runResult struct {
	args           []string
	code           int
	stdout, stderr string
	dur            time.Duration
}

func (r runResult) String() string {
	return fmt.Sprintf("agentrun %s\n  exit %d after %v\n  stdout: %s\n  stderr: %s",
		strings.Join(r.args, " "), r.code, r.dur.Round(time.Millisecond), indent(r.stdout), indent(r.stderr))
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "(empty)"
	}
	return strings.ReplaceAll(s, "\n", "\n          ")
}

// start launches agentrun spawn [--workspace WS] FLAGS -- CMD...; wait
// collects it.
type running struct {
	t      *testing.T
	cmd    *exec.Cmd
	args   []string
	out    *bytes.Buffer
	errb   *bytes.Buffer
	start  time.Time
	guard  time.Duration
	done   chan struct{}
	result runResult
	// sess is the session the command runs in when the harness runs
	// sandboxes through sessions (AGENTRUN_IT_VIA=session), else nil.
	sess *viaSess
}

// startSpawn starts agentrun spawn with cfg and command, or, with
// AGENTRUN_IT_VIA=session, the same sandbox as a session: create with the
// same policy flags, exec of the command, delete once it has ended
// (startViaSession). The running behaves the same for tests either way.
func startSpawn(t *testing.T, cfg spawnCfg, command ...string) *running {
	t.Helper()
	if viaSession {
		return startViaSession(t, cfg, command...)
	}
	args := []string{"spawn"}
	if cfg.ws != "" {
		args = append(args, "--workspace", cfg.ws)
	}
	args = append(args, cfg.flags...)
	if command != nil {
		args = append(args, "--")
		args = append(args, command...)
	}
	bin := agentrunBin
	if cfg.bin != "" {
		bin = cfg.bin
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + sandboxPath, "LANG=C"}, cfg.env...)
	cmd.Stdin = cfg.stdin
	cmd.ExtraFiles = cfg.extraFiles
	cmd.Dir = cfg.dir
	if cmd.Dir == "" {
		cmd.Dir = os.TempDir()
	}
	cmd.SysProcAttr = cfg.sys
	r := &running{t: t, cmd: cmd, args: args, out: new(bytes.Buffer), errb: new(bytes.Buffer), guard: cfg.guard, done: make(chan struct{})}
	if r.guard == 0 {
		r.guard = 60 * time.Second
	}
	cmd.Stdout, cmd.Stderr = r.out, r.errb
	if cfg.stdout != nil {
		cmd.Stdout = cfg.stdout
	}
	if cfg.stderr != nil {
		cmd.Stderr = cfg.stderr
	}
	// A process that survived the sandbox and holds our pipes must not
	// hang the test; the orphan tests detect survivors themselves.
	cmd.WaitDelay = 5 * time.Second
	r.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %s: %v", bin, strings.Join(args, " "), err)
	}
	go func() {
		err := cmd.Wait()
		r.result = runResult{args: args, code: exitCode(cmd, err), stdout: r.out.String(), stderr: r.errb.String(), dur: time.Since(r.start)}
		close(r.done)
	}()
	return r
}

func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return -1
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		// agentrun itself died of a signal: report it shell-style.
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

func (r *running) pid() int { return r.cmd.Process.Pid }

func (r *running) wait() runResult {
	r.t.Helper()
	select {
	case <-r.done:
		r.sess.report(r.t)
		return r.result
	case <-time.After(r.guard):
		_ = r.cmd.Process.Kill()
		<-r.done
		r.t.Fatalf("hang guard: agentrun still running after %v, killed\n%s", r.guard, r.result)
		return r.result
	}
}

// spawn runs agentrun to completion.
func spawn(t *testing.T, cfg spawnCfg, command ...string) runResult {
	t.Helper()
	return startSpawn(t, cfg, command...).wait()
}

// sh runs a shell one-liner in a sandbox on workspace ws.
func sh(t *testing.T, ws string, flags []string, script string) runResult {
	t.Helper()
	return spawn(t, spawnCfg{ws: ws, flags: flags}, "/bin/sh", "-c", script)
}

// attack runs /workspace/attacker SUB ARGS... in a sandbox on ws (which
// newWorkspace made).
func attack(t *testing.T, ws string, flags []string, sub ...string) runResult {
	t.Helper()
	return spawn(t, spawnCfg{ws: ws, flags: flags}, append([]string{"/workspace/attacker"}, sub...)...)
}

// verdict returns the attacker's verdict word and detail.
func (r runResult) verdict() (string, string) {
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, v := range []string{"BLOCKED", "ESCAPED", "ERROR"} {
			if d, ok := strings.CutPrefix(lines[i], v+" "); ok {
				return v, d
			}
		}
	}
	return "", ""
}

// mustBlock asserts that the attack ran and was blocked, and returns the
// attacker's account of how ("" when it was not blocked).
func mustBlock(t *testing.T, r runResult, what string) string {
	t.Helper()
	v, d := r.verdict()
	switch {
	case v == "BLOCKED" && r.code == 0:
		t.Logf("%s: blocked: %s", what, d)
		return d
	case v == "ESCAPED":
		t.Errorf("SANDBOX ESCAPE: %s succeeded: %s\n%s", what, d, r)
	default:
		t.Errorf("%s: inconclusive (no BLOCKED verdict, exit %d): the attack did not run as intended\n%s", what, r.code, r)
	}
	return ""
}

// mustSucceed asserts that the operation ran and went through (positive
// controls: the same attempt must work where the policy allows it).
func mustSucceed(t *testing.T, r runResult, what string) string {
	t.Helper()
	v, d := r.verdict()
	if v != "ESCAPED" || r.code != 1 {
		t.Errorf("positive control %s failed: want the operation to succeed, got %s %s (exit %d)\n%s", what, v, d, r.code, r)
	}
	return d
}

// mustExit asserts agentrun's exit status.
func mustExit(t *testing.T, r runResult, want int, what string) {
	t.Helper()
	if r.code != want {
		t.Errorf("%s: exit %d, want %d\n%s", what, r.code, want, r)
	}
}

// ---------------------------------------------------------------------------
// Host state

// hostProcess starts a long sleep on the host whose argv[0] is marker and
// returns it with a channel closed when it exits.
func hostProcess(t *testing.T, marker string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary on the host")
	}
	cmd := exec.Command(sleep, "600")
	cmd.Args[0] = marker
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return cmd, done
}

func alive(done <-chan struct{}) bool {
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// hostProcsWith lists host processes (other than this test) whose command
// line contains marker, as "pid: cmdline".
func hostProcsWith(marker string) []string {
	var out []string
	self := strconv.Itoa(os.Getpid())
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		out = append(out, e.Name()+": "+strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))))
	}
	return out
}

// mustNotSurvive asserts that no host process carries any of the markers.
// Survivors found right away get a short grace (a hang guard against a
// slow teardown, not a timing assertion) and are killed afterwards.
func mustNotSurvive(t *testing.T, what string, markers ...string) {
	t.Helper()
	find := func() []string {
		var all []string
		for _, m := range markers {
			all = append(all, hostProcsWith(m)...)
		}
		return all
	}
	first := find()
	if len(first) == 0 {
		return
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && len(find()) > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if left := find(); len(left) > 0 {
		t.Errorf("%s: processes survived the sandbox on the host:\n  %s", what, strings.Join(left, "\n  "))
		for _, l := range left {
			if pid, err := strconv.Atoi(strings.SplitN(l, ":", 2)[0]); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return
	}
	t.Logf("%s: %d process(es) were still visible right after agentrun returned and vanished within 3 s: %v", what, len(first), first)
}

// sysctl reads /proc/sys/PATH ("" when absent).
func sysctl(p string) string {
	b, err := os.ReadFile(filepath.Join("/proc/sys", p))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ---------------------------------------------------------------------------
// Rootless variants started by root

// testUser is the unprivileged account used for rootless variants when
// the suite runs as root, or nil.
func testUser(t *testing.T) *user.User {
	t.Helper()
	name := os.Getenv(envTestUser)
	if name == "-" {
		return nil
	}
	if name == "" {
		name = "artest"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil
	}
	return u
}

func credential(t *testing.T, u *user.User) *syscall.SysProcAttr {
	t.Helper()
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		t.Fatalf("bad ids for %s: %s:%s", u.Username, u.Uid, u.Gid)
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
}

func chownTree(t *testing.T, root string, uid, gid int) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fileOwner returns the host uid and gid of p.
func fileOwner(t *testing.T, p string) (int, int) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
