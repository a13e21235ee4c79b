//go:build linux

package integration

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The suite through sessions. With AGENTRUN_IT_VIA=session every sandbox
// the harness starts (startSpawn, and so spawn, sh and attack) is a
// session instead of a spawn:
//
//	agentrun create <the spawn's policy flags> ID      (the spawn's cwd)
//	agentrun exec [--timeout D] ID -- CMD...
//	agentrun delete ID                                 (once CMD has ended)
//
// and a t.Cleanup runs delete -f should the test end first. The running a
// test gets is the exec's: its pid takes the signals (the exec CLI
// forwards INT, TERM, HUP and QUIT to the command's process group), and
// wait returns once the command has ended and the session is deleted, so
// checks for survivors see the session's end as they see a spawn's. A
// refusal at create (a bad bind, a symlinked workspace, a refused
// capability: exit 125 and one line) is what the test sees, as it would
// see the spawn's; exec and delete then do not run. The caller's extra
// fds (spawnCfg.extraFiles) reach create and exec both, so that neither
// may let them into the sandbox; a policy read from stdin is create's.
//
// What does not apply to a session is skipped by name (viaSessionSkips),
// with the reason; a test that passes a flag only spawn takes (--result,
// --verbose) without being listed there fails, so that a new test is
// looked at rather than silently skipped.

// viaSession is set by TestMain when $AGENTRUN_IT_VIA is "session".
var viaSession bool

// viaXDG is a private runtime directory for a caller that is not root
// (0700, its own), given to its sessions as $XDG_RUNTIME_DIR unless the
// test sets one: the exec CLI's C client serves an exec only where it can
// be sure of the state directory (root's, or a private $XDG_RUNTIME_DIR's;
// fastpath/sessexec.c) and leaves the others to Go, so without it an
// unprivileged run would never exercise the C client.
var viaXDG string

func setupViaSession() (cleanup func(), err error) {
	if os.Geteuid() == 0 {
		return func() {}, nil
	}
	viaXDG, err = os.MkdirTemp("", "agentrun-it-via-xdg-")
	if err != nil {
		return nil, err
	}
	return func() { _ = os.RemoveAll(viaXDG) }, nil
}

// viaSkip is why a test cannot run through a session, and when (nil:
// always).
type viaSkip struct {
	why  string
	when func() bool
}

// viaSessionSkips are the tests and subtests (by t.Name(), written with
// the spaces of the source, which t.Name() turns into underscores) that
// cannot run through a session, and why. A name covers its subtests.
var viaSessionSkips = map[string]viaSkip{
	// The --result JSON and --verbose are spawn's reports; create and exec
	// write none (a session reports denials as events to its subscribers).
	"TestResultFile": {why: "spawn only: checks the JSON of --result (exit_code, signal, timed_out, duration_ms), which create and exec " +
		"do not write; the statuses themselves are TestExitStatus's, which runs through the session"},
	"TestCapAdd": {why: "spawn only: its first check reads the capabilities from --result; TestViaSessionCapAdd checks the held " +
		"capabilities, the raw socket and the refusal of an unknown one through a session"},
	"TestViolationReports/keyctl":             {why: "spawn only: the violation entry of --result and the --verbose line on stderr"},
	"TestViolationReports/unshare":            {why: "spawn only: the violation entry of --result and the --verbose line on stderr"},
	"TestViolationReports/fchmodat":           {why: "spawn only: the violation entry of --result and the --verbose line on stderr"},
	"TestViolationReports/clean run has none": {why: "spawn only: the violations list of --result"},
	"TestSeccompProfiles/docker profile applies": {why: "spawn only: also reads the profile's name from --result; " +
		"TestViaSessionSeccompProfiles checks that the profile applies in a session"},
	"TestSeccompProfiles/profile denying the init's handover calls, verbose=true": {why: "spawn only: --verbose " +
		"(the verbose=false case runs through the session)"},
	"TestSeccompProfiles/unconfined is reported": {why: "spawn only: also reads seccomp \"unconfined\" from --result; " +
		"TestViaSessionSeccompProfiles checks that an unconfined session's commands run without a filter"},
	"TestTimeoutKillsTree": {why: "spawn only: spawn's --timeout ends the whole sandbox and --result says timed_out; exec --timeout " +
		"kills the exec's process group only (a setsid child lives on until delete, README \"Sessions\"), and exec writes no --result"},
	"TestUsageHierarchies": {why: "spawn only: the cgroup hierarchies a spawn joins with and without --result, its init found as the " +
		"CLI's only child (a session's init is its holder's child)"},
	"TestDefaultPidsNextToOtherLimits": {why: "spawn only: finds the init as the CLI's only child (a session's init is its holder's) " +
		"and passes --result; TestViaSessionDefaultPids checks the default pids.max of a session's cgroup"},
	"TestDefaultPidsStopsBomb": {why: "spawn only: reads pids_peak from --result; TestViaSessionDefaultPids checks the default " +
		"pids limit of a session"},
	"TestOOMKeepsCommandStatus": {why: "spawn only: spawn's own report of an OOM kill on stderr (\"a process in the sandbox was " +
		"killed\", \"memory limit ... hit\"), which exec does not print, and --result; the OOM kill's 137 is TestLimits's, " +
		"which runs through the session"},
	"TestInitHidesLongCommandLine": {why: "spawn only: 70,001 arguments are past what a session's exec takes (cinit's AR_REQ_MAX, " +
		"160 KiB or 16,384 strings per request: exit 125, \"argument list too long\"); TestViaSessionLongCommandLine checks " +
		"PID 1's command line with as many arguments as an exec takes"},

	// Signals: the exec CLI forwards INT, TERM, HUP and QUIT.
	"TestSignalsReachCommand/USR1":  {why: "spawn only: spawn forwards SIGUSR1; the exec CLI forwards INT, TERM, HUP and QUIT only"},
	"TestSignalsReachCommand/USR2":  {why: "spawn only: spawn forwards SIGUSR2; the exec CLI forwards INT, TERM, HUP and QUIT only"},
	"TestSignalsReachCommand/WINCH": {why: "spawn only: spawn forwards SIGWINCH; the exec CLI forwards INT, TERM, HUP and QUIT only"},
	"TestSignalsReachCommand/TERM on a prestart hit": {why: "spawn only: prestart (the constructor starting a spawn's init " +
		"from a cached plan) and its --result field"},
	"TestSignalsReachCommand/TERM after the command ended": {why: "spawn only: holds the CLI writing --result into a FIFO " +
		"after the command ended; exec writes no --result"},

	// Spawn's command line: create and exec report usage errors as the
	// other verbs do, exit 2 with a usage line.
	"TestBadInput/unknown flag": {why: "spawn only: spawn refuses an unknown flag with 125 and one line; create, like every " +
		"verb, exits 2 with the error and a usage line"},
	"TestBadInput/--timeout bogus": {why: "spawn only: --timeout is an exec flag in a session, and exec's usage errors exit 2 " +
		"with a usage line"},
	"TestBadInput/no command": {why: "spawn only: spawn refuses a missing command with 125; exec without a command is a usage " +
		"error (exit 2 and a usage line)"},
	"TestBadInput/empty command": {why: "spawn only: spawn refuses an empty command with 125; exec without a command is a " +
		"usage error (exit 2 and a usage line)"},
	"TestBadInput/--result records the setup error": {why: "spawn only: --result"},

	// Prestart: the constructor's cached plans are spawn's.
	"TestPrestart":                       {why: "spawn only: prestart (plans cached by spawns, read by the constructor of the next spawn)"},
	"TestPrestartPolicyFile":             {why: "spawn only: prestart's cache key and --result's prestart field"},
	"TestPrestartStalePlanWritesNothing": {why: "spawn only: prestart's cached plans and --result's prestart field"},
	"TestPrestartLimitsHold":             {why: "spawn only: a prestart hit's cgroup, and --result's prestart and pids_peak"},
	"TestPrestartKilledEarly":            {why: "spawn only: SIGKILL at each point of a prestart hit (warmed through --result)"},
	"TestPrestartStarterKilled":          {why: "spawn only: prestart's starter process"},
	"TestPrestartStarterStopped":         {why: "spawn only: prestart's starter process"},

	// Express: fastpath/express.c runs spawns only.
	"TestExpress":                         {why: "spawn only: the express path (fastpath/express.c) runs spawns, never a session"},
	"TestExpressStaleHostInputs":          {why: "spawn only: the express path's records (fastpath/express.c)"},
	"TestExpressLeavesNoOrphans":          {why: "spawn only: the express path, and prestart through --result"},
	"TestExpressStartFailsAfterClone":     {why: "spawn only: the express path's own start of the init"},
	"TestExpressWithoutCgroup":            {why: "spawn only: the express path, and --result's limits field"},
	"TestExpressEarlyFilter":              {why: "spawn only: the express path's early filter records"},
	"TestRootTemplateExpressKeepsLastUse": {why: "spawn only: the express path's touch of the template's last use"},
	"TestRootTemplateNoExpressWithoutIt":  {why: "spawn only: the express path's record of a spawn without its template"},
	"TestRootTemplateSweep": {when: expressHere, why: "spawn only here: where the express path applies (root, cgroup v1 pids) " +
		"sandbox A must be an express spawn (its trace); as an unprivileged caller the test runs through sessions"},
}

// viaSessionSkipNames is viaSessionSkips by t.Name().
var viaSessionSkipNames = func() map[string]viaSkip {
	m := make(map[string]viaSkip, len(viaSessionSkips))
	for k, v := range viaSessionSkips {
		m[strings.ReplaceAll(k, " ", "_")] = v
	}
	return m
}()

// skipViaSession skips t in session mode when it or a test above it is
// listed in viaSessionSkips.
func skipViaSession(t *testing.T) {
	t.Helper()
	if !viaSession {
		return
	}
	for name := t.Name(); ; {
		if s, ok := viaSessionSkipNames[name]; ok && (s.when == nil || s.when()) {
			t.Skip(s.why)
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return
		}
		name = name[:i]
	}
}

// viaSess is the session a running command runs in.
type viaSess struct {
	id   string
	bin  string
	env  []string
	sys  *syscall.SysProcAttr
	dead chan struct{} // closed once the exec has ended (or never started)

	mu       sync.Mutex
	deleted  bool
	delFail  string // what a failed delete said, reported by wait
	reported bool
}

// viaFlag is a spawn flag that create does not take.
type viaFlag struct {
	name  string
	value bool // takes a value
}

var viaSpawnOnly = []viaFlag{{"timeout", true}, {"result", true}, {"verbose", false}}

// splitViaSession splits a spawn's policy flags into create's, exec's
// (--timeout, which exec takes for its command) and the ones neither
// takes.
func splitViaSession(policy []string) (create, execFlags, spawnOnly []string) {
	for i := 0; i < len(policy); i++ {
		a := policy[i]
		name, _, hasInline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *viaFlag
		if strings.HasPrefix(a, "-") {
			for j := range viaSpawnOnly {
				if viaSpawnOnly[j].name == name {
					f = &viaSpawnOnly[j]
				}
			}
		}
		if f == nil {
			create = append(create, a)
			continue
		}
		group := []string{a}
		if f.value && !hasInline && i+1 < len(policy) {
			i++
			group = append(group, policy[i])
		}
		if f.name == "timeout" {
			execFlags = append(execFlags, group...)
		} else {
			spawnOnly = append(spawnOnly, group...)
		}
	}
	return create, execFlags, spawnOnly
}

// policyFromStdin says whether the policy flags read the policy from
// stdin, which is then create's rather than the command's.
func policyFromStdin(policy []string) bool {
	for i, a := range policy {
		v := ""
		switch {
		case (a == "--policy" || a == "-policy") && i+1 < len(policy):
			v = policy[i+1]
		case strings.HasPrefix(a, "--policy="), strings.HasPrefix(a, "-policy="):
			_, v, _ = strings.Cut(a, "=")
		}
		if v == "/dev/stdin" || v == "/proc/self/fd/0" || v == "-" {
			return true
		}
	}
	return false
}

// run runs agentrun ARGS... to completion as the session's caller (its
// binary, environment and credentials), with a hang guard.
func (s *viaSess) run(dir string, guard time.Duration, args ...string) runResult {
	cmd := exec.Command(s.bin, args...)
	cmd.Env = s.env
	cmd.Dir = dir
	cmd.SysProcAttr = s.sys
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return runResult{args: args, code: -1, stderr: err.Error()}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(guard):
		_ = cmd.Process.Kill()
		err = <-done
		errb.WriteString(fmt.Sprintf("\n(hang guard: killed after %v)", guard))
	}
	return runResult{args: args, code: exitCode(cmd, err), stdout: out.String(), stderr: errb.String(), dur: time.Since(start)}
}

// delete ends the session once its command has ended.
func (s *viaSess) delete() {
	r := s.run("/", 30*time.Second, "delete", s.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.code == 0 {
		s.deleted = true
		return
	}
	s.delFail = r.String()
}

// forceDelete is the test's cleanup: delete -f unless deleted.
func (s *viaSess) forceDelete(t *testing.T) {
	s.mu.Lock()
	deleted := s.deleted
	s.mu.Unlock()
	if deleted {
		return
	}
	if r := s.run("/", 30*time.Second, "delete", "-f", s.id); r.code != 0 && !strings.Contains(r.stderr, "does not exist") {
		t.Logf("session mode: cleanup: %s", r)
	}
}

// report fails the test once if the session's delete failed.
func (s *viaSess) report(t *testing.T) {
	if s == nil {
		return
	}
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.delFail != "" && !s.reported {
		s.reported = true
		t.Errorf("session mode: the session's delete after its command failed:\n%s", s.delFail)
	}
}

// startViaSession is startSpawn through a session.
func startViaSession(t *testing.T, cfg spawnCfg, command ...string) *running {
	t.Helper()
	skipViaSession(t)
	var full []string
	if cfg.ws != "" {
		full = append(full, "--workspace", cfg.ws)
	}
	full = append(full, cfg.flags...)
	if command != nil {
		full = append(full, "--")
		full = append(full, command...)
	}
	policy, argv, dashes := full, []string(nil), false
	for i, a := range full {
		if a == "--" {
			policy, argv, dashes = full[:i], full[i+1:], true
			break
		}
	}
	createFlags, execFlags, spawnOnly := splitViaSession(policy)
	if len(spawnOnly) > 0 {
		t.Fatalf("session mode: %s passes %q, which only spawn takes: list it in viaSessionSkips (integration/via_session_test.go) "+
			"with the reason, or let it do without in session mode", t.Name(), spawnOnly)
	}
	bin := agentrunBin
	if cfg.bin != "" {
		bin = cfg.bin
	}
	env := []string{"PATH=" + sandboxPath, "LANG=C"}
	if viaXDG != "" && cfg.sys == nil {
		env = append(env, "XDG_RUNTIME_DIR="+viaXDG)
	}
	if v, ok := os.LookupEnv("AGENTRUN_EXEC_FAST"); ok {
		env = append(env, "AGENTRUN_EXEC_FAST="+v)
	}
	env = append(env, cfg.env...)
	dir := cfg.dir
	if dir == "" {
		dir = os.TempDir()
	}
	guard := cfg.guard
	if guard == 0 {
		guard = 60 * time.Second
	}
	s := &viaSess{id: token("it-"), bin: bin, env: env, sys: cfg.sys, dead: make(chan struct{})}
	createArgs := append(append([]string{"create"}, createFlags...), s.id)
	execArgs := append(append([]string{"exec"}, execFlags...), s.id)
	if dashes {
		execArgs = append(execArgs, "--")
	}
	execArgs = append(execArgs, argv...)
	args := append(append(append([]string{}, createArgs...), "&&", "agentrun"), execArgs...)
	r := &running{t: t, args: args, out: new(bytes.Buffer), errb: new(bytes.Buffer), guard: guard, done: make(chan struct{}), sess: s}
	// Registered first: whatever happens below, the session goes.
	t.Cleanup(func() {
		if r.cmd != nil && r.cmd.Process != nil {
			select {
			case <-s.dead:
			default:
				_ = r.cmd.Process.Kill()
			}
		}
		<-r.done
		s.forceDelete(t)
	})

	// create: the sandbox is built here, so a refusal is create's.
	stdinToCreate := policyFromStdin(policy)
	create := exec.Command(bin, createArgs...)
	create.Env, create.Dir, create.SysProcAttr = env, dir, cfg.sys
	create.ExtraFiles = cfg.extraFiles
	if stdinToCreate {
		create.Stdin = cfg.stdin
	}
	var cout, cerr bytes.Buffer
	create.Stdout, create.Stderr = &cout, &cerr
	create.WaitDelay = 5 * time.Second
	r.start = time.Now()
	if err := create.Start(); err != nil {
		close(s.dead)
		close(r.done)
		t.Fatalf("start %s %s: %v", bin, strings.Join(createArgs, " "), err)
	}
	created := make(chan error, 1)
	go func() { created <- create.Wait() }()
	var err error
	select {
	case err = <-created:
	case <-time.After(guard):
		_ = create.Process.Kill()
		err = <-created
		close(s.dead)
		r.result = runResult{args: createArgs, code: exitCode(create, err), stdout: cout.String(), stderr: cerr.String(), dur: time.Since(r.start)}
		close(r.done)
		t.Fatalf("hang guard: agentrun create still running after %v, killed\n%s", guard, r.result)
	}
	if code := exitCode(create, err); code != 0 {
		// Refused (or failed): what a spawn refused at its build shows.
		r.cmd = create
		if cfg.stdout != nil {
			_, _ = io.Copy(cfg.stdout, &cout)
		}
		if cfg.stderr != nil {
			_, _ = io.Copy(cfg.stderr, bytes.NewReader(cerr.Bytes()))
		}
		close(s.dead)
		r.result = runResult{args: createArgs, code: code, stdout: cout.String(), stderr: cerr.String(), dur: time.Since(r.start)}
		close(r.done)
		return r
	}
	if cfg.stderr != nil && cerr.Len() > 0 {
		_, _ = cfg.stderr.Write(cerr.Bytes())
	}

	cmd := exec.Command(bin, execArgs...)
	cmd.Env, cmd.Dir, cmd.SysProcAttr = env, dir, cfg.sys
	cmd.ExtraFiles = cfg.extraFiles
	if !stdinToCreate {
		cmd.Stdin = cfg.stdin
	}
	cmd.Stdout, cmd.Stderr = r.out, r.errb
	if cfg.stdout != nil {
		cmd.Stdout = cfg.stdout
	}
	if cfg.stderr != nil {
		cmd.Stderr = cfg.stderr
	}
	// As in startSpawn: a survivor holding the pipes must not hang the
	// test (the session's delete ends every process anyway).
	cmd.WaitDelay = 5 * time.Second
	r.cmd = cmd
	if err := cmd.Start(); err != nil {
		close(s.dead)
		close(r.done)
		t.Fatalf("start %s %s: %v", bin, strings.Join(execArgs, " "), err)
	}
	go func() {
		err := cmd.Wait()
		code := exitCode(cmd, err)
		close(s.dead)
		s.delete()
		r.result = runResult{args: args, code: code, stdout: cout.String() + r.out.String(), stderr: cerr.String() + r.errb.String(), dur: time.Since(r.start)}
		close(r.done)
	}()
	return r
}

// ---------------------------------------------------------------------------
// Session mode's own checks: what a test skipped above checks that a
// session can be asked too, and what a spawn test checks with a spawn of
// its own rather than through the harness.

// needViaSession skips outside session mode.
func needViaSession(t *testing.T) {
	t.Helper()
	if !viaSession {
		t.Skipf("session mode only ($%s=session): the spawn mode's test of the same property is named in its comment", envVia)
	}
}

// newViaSession creates a session with policy flags as the caller, deleted
// (-f) when the test ends.
func newViaSession(t *testing.T, flags ...string) *viaSess {
	t.Helper()
	env := []string{"PATH=" + sandboxPath, "LANG=C"}
	if viaXDG != "" {
		env = append(env, "XDG_RUNTIME_DIR="+viaXDG)
	}
	s := &viaSess{id: token("it-"), bin: agentrunBin, env: env}
	t.Cleanup(func() { s.forceDelete(t) })
	if r := s.run(os.TempDir(), 60*time.Second, append(append([]string{"create"}, flags...), s.id)...); r.code != 0 {
		t.Fatalf("create: %s", r)
	}
	return s
}

// TestViaSessionCapAdd is TestCapAdd without its --result: a granted
// capability is held by a session's commands (and only it), and usable in
// the sandbox's own network namespace; none is held by default; an unknown
// one is refused at create.
func TestViaSessionCapAdd(t *testing.T) {
	needViaSession(t)
	t.Parallel()
	ws := newWorkspace(t)
	script := `grep -E '^Cap(Eff|Bnd|Amb)' /proc/self/status | tr -d '\t\n'; echo`
	r := spawn(t, spawnCfg{ws: ws, flags: []string{"--cap-add", "CAP_NET_RAW"}}, "/bin/sh", "-c", script)
	want := "CapEff:0000000000002000CapBnd:0000000000002000CapAmb:0000000000002000"
	if r.code != 0 || strings.TrimSpace(r.stdout) != want {
		t.Fatalf("want exactly CAP_NET_RAW (bit 13) in effective, bounding and ambient, got %q\n%s", r.stdout, r)
	}
	raw := `python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1); print("raw ok")'`
	if r := spawn(t, spawnCfg{ws: ws, flags: []string{"--cap-add", "net_raw"}}, "/bin/sh", "-c", raw); !strings.Contains(r.stdout, "raw ok") {
		t.Errorf("CAP_NET_RAW must allow a raw socket in the sandbox's network namespace\n%s", r)
	}
	if r := spawn(t, spawnCfg{ws: ws}, "/bin/sh", "-c", raw); strings.Contains(r.stdout, "raw ok") {
		t.Errorf("without --cap-add a raw socket must fail\n%s", r)
	}
	r = spawn(t, spawnCfg{ws: ws, flags: []string{"--cap-add", "CAP_FLY"}}, "/bin/true")
	if msg := strings.TrimSpace(r.stderr); r.code != 125 || strings.Contains(msg, "\n") || !strings.Contains(msg, "CAP_FLY") {
		t.Errorf("an unknown capability must be refused with 125 and one line naming it\n%s", r)
	}
}

// TestViaSessionSeccompProfiles is what TestSeccompProfiles checks with
// --result: a Docker-format profile applies to a session's commands, and
// unconfined runs them without a filter.
func TestViaSessionSeccompProfiles(t *testing.T) {
	needViaSession(t)
	t.Parallel()
	dir := tempDir(t)
	docker := dir + "/docker.json"
	writeFile(t, docker, `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
		"syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}`, 0o644)
	t.Run("docker profile applies", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		r := spawn(t, spawnCfg{ws: ws, flags: []string{"--seccomp-profile", docker}}, "/bin/sh", "-c", "mkdir d; echo rc=$?; grep '^Seccomp:' /proc/self/status")
		if !strings.Contains(r.stdout, "rc=1") || !strings.Contains(r.stderr, "Permission denied") || !strings.Contains(r.stdout, "Seccomp:\t2") {
			t.Fatalf("mkdir must fail with EACCES under the profile\n%s", r)
		}
		if exists(ws + "/d") {
			t.Error("mkdir landed despite the profile")
		}
	})
	t.Run("unconfined", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		if isRoot() {
			// As root a root-owned workspace needs the filter (setuid
			// files): one owned by the test user.
			if testUser(t) == nil {
				t.Skipf("no unprivileged test user ($%s) to own the workspace", envTestUser)
			}
			chownToTestUser(t, ws)
		}
		r := spawn(t, spawnCfg{ws: ws, flags: []string{"--seccomp-profile", "unconfined"}}, "/bin/sh", "-c", "grep Seccomp: /proc/self/status")
		if r.code != 0 || !strings.Contains(r.stdout, "Seccomp:\t0") {
			t.Fatalf("unconfined must run the session's commands without a filter\n%s", r)
		}
	})
}

// TestViaSessionDefaultPids is TestDefaultPidsNextToOtherLimits for a
// session: --cpus or --memory without --pids keeps the default pids limit
// on the session's cgroup (its init is found by agentrun state).
func TestViaSessionDefaultPids(t *testing.T) {
	needViaSession(t)
	needV1Root(t)
	t.Parallel()
	for _, flags := range [][]string{{"--cpus", "1"}, {"--memory", "256M"}, nil} {
		ws := tempDir(t)
		run := startSpawn(t, spawnCfg{ws: ws, flags: flags}, "/bin/sh", "-c", "touch /workspace/up; exec sleep 30")
		waitForFile(t, ws+"/up", 20*time.Second)
		st := run.sess.run("/", 20*time.Second, "state", run.sess.id)
		var pid int
		if _, err := fmt.Sscanf(st.stdout[strings.Index(st.stdout, `"pid":`)+len(`"pid":`):], "%d", &pid); err != nil || pid <= 0 {
			t.Fatalf("no pid in the session's state: %v\n%s", err, st)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		pidsMax := ""
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) == 3 && strings.Contains(","+f[1]+",", ",pids,") && strings.Contains(f[2], "/sbx-") {
				m, err := os.ReadFile("/sys/fs/cgroup/pids" + f[2] + "/pids.max")
				if err != nil {
					t.Fatal(err)
				}
				pidsMax = strings.TrimSpace(string(m))
			}
		}
		_ = run.cmd.Process.Signal(syscall.SIGTERM) // forwarded: sleep ends
		run.wait()
		if pidsMax != "4096" {
			t.Errorf("SANDBOX LIMIT: session with %v: pids.max %q, want the default 4096 (empty: in no pids cgroup)\n%s", flags, pidsMax, b)
		}
	}
}

// TestViaSessionLongCommandLine is TestInitHidesLongCommandLine with as
// many arguments as a session's exec takes: PID 1 shows "agentrun-init",
// never the command line, and the command gets every argument. The
// spawn's 70,001 arguments are tried too: taken in full, or refused with
// 125 and one line.
func TestViaSessionLongCommandLine(t *testing.T) {
	needViaSession(t)
	t.Parallel()
	ws := newWorkspace(t)
	for _, n := range []int{10000, 70001} {
		marker := token("agentrun-argv-")
		args := []string{"/bin/sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; echo; echo "args=$#"`, "sh", marker}
		for i := 1; i < n; i++ {
			args = append(args, "x")
		}
		r := spawn(t, spawnCfg{ws: ws}, args...)
		if strings.Contains(r.stdout, marker) {
			t.Fatalf("/proc/1/cmdline in the session shows the exec's command line:\n%.300s", r.stdout)
		}
		if n > 10000 && r.code == 125 && strings.Count(strings.TrimSpace(r.stderr), "\n") == 0 {
			t.Logf("%d arguments: refused: %s", n, strings.TrimSpace(r.stderr))
			continue
		}
		mustExit(t, r, 0, fmt.Sprintf("exec with %d arguments", n))
		if !strings.Contains(r.stdout, fmt.Sprintf("args=%d", n)) || !strings.Contains(r.stdout, "agentrun-init") {
			t.Errorf("want args=%d and agentrun-init in the output:\n%.300s", n, r.stdout)
		}
	}
}

// TestViaSessionTIOCSTI is TestTIOCSTI's sandbox part for an exec, whose
// stdio the C client passes to the command as they are: the command cannot
// push keystrokes into the terminal the exec was started on, nor use
// TIOCLINUX on it.
func TestViaSessionTIOCSTI(t *testing.T) {
	needViaSession(t)
	t.Parallel()
	ws := newWorkspace(t)
	s := newViaSession(t, "--workspace", ws)
	inject := token("INJ") + "\n"
	for _, tc := range []struct{ name, sub string }{{"TIOCSTI", "tiocsti"}, {"TIOCLINUX", "tioclinux"}} {
		t.Run(tc.name, func(t *testing.T) {
			master, slave, _ := openPTY(t)
			argv := []string{agentrunBin, "exec", s.id, "--", "/workspace/attacker", tc.sub}
			if tc.sub == "tiocsti" {
				argv = append(argv, inject)
			}
			cmd := ttyCommand(slave, argv...)
			cmd.Env = append(cmd.Env, s.env[2:]...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			r := runOnTTY(t, cmd, &stdout, &stderr)
			mustBlock(t, r, tc.name+" on the exec's terminal")
			inq, echoed := pending(t, master, slave, 200*time.Millisecond)
			if inq != 0 || strings.Contains(echoed, strings.TrimSpace(inject)) {
				t.Errorf("SANDBOX ESCAPE: keystrokes reached the exec's terminal: %d bytes queued, master read %q\n%s", inq, echoed, r)
			}
		})
	}
}
