//go:build linux

// Package spawn defines the benchmark's contenders (bare fork+exec, unshare,
// bubblewrap, runc, agentrun's CLI and its Go API, and optionally an older
// agentrun build beside the current one) and measures them: interleaved
// single spawns for latency, and concurrent batches for scaling.
package spawn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/bench/internal/report"
	"github.com/agentrun/agentrun/seccomp"
)

// Contender names, in display order. They are the values -only accepts.
const (
	ForkExec     = "fork+exec"
	Unshare      = "unshare"
	Bwrap        = "bwrap"
	Runc         = "runc"
	RuncRootless = "runc-rootless"
	AgentrunNone = "agentrun-none"
	AgentrunHost = "agentrun-host"
	// AgentrunNoPrestart is agentrun-none with AGENTRUN_PRESTART=0: every
	// spawn starts its init after the Go runtime, as a first spawn with
	// new flags or working directory does.
	AgentrunNoPrestart = "agentrun-noprestart"
	// AgentrunNoExpress is agentrun-none with AGENTRUN_EXPRESS=0: a
	// prestart hit that the Go side finishes, as before the express path.
	AgentrunNoExpress = "agentrun-noexpress"
	// AgentrunUnconfined is agentrun-none without the seccomp filter: the
	// filter's share of a spawn.
	AgentrunUnconfined = "agentrun-unconfined"
	AgentrunAPI        = "agentrun-api"
	// BwrapRootless and AgentrunRootless are bwrap and agentrun-none run
	// by an unprivileged user (nobody when the driver is root): the case
	// of most agent runners.
	BwrapRootless    = "bwrap-rootless"
	AgentrunRootless = "agentrun-rootless"
	// AgentrunNoneBase and AgentrunRootlessBase are agentrun-none and
	// agentrun-rootless run with the baseline build (Options.Baseline), so
	// that a change's effect on the ratio to bwrap is measured in one run.
	AgentrunNoneBase     = AgentrunNone + report.BaseSuffix
	AgentrunRootlessBase = AgentrunRootless + report.BaseSuffix
)

// Names lists every contender in display order.
func Names() []string {
	return append([]string{ForkExec, Unshare, Bwrap, Runc, RuncRootless, AgentrunNone, AgentrunNoneBase, AgentrunNoPrestart, AgentrunNoExpress, AgentrunHost, AgentrunUnconfined, AgentrunAPI, BwrapRootless, AgentrunRootless, AgentrunRootlessBase}, sessionNames()...)
}

// BaseNames lists the contenders that need Options.Baseline.
func BaseNames() []string { return []string{AgentrunNoneBase, AgentrunRootlessBase} }

// Contender is one way of starting /bin/true in a sandbox (or without one,
// for the floor). Exactly one of argv and inProc is set when it is runnable.
type Contender struct {
	Name    string
	Label   string
	Status  report.Status
	Reason  string
	Dir     string
	Env     []string
	Cred    *syscall.Credential // run the tool as another user (rootless runc)
	Command string              // argv as shown in the report

	// argv returns the command for the seq-th run; runc needs a fresh
	// container id each time, the others ignore seq.
	argv func(seq uint64) []string
	// inProc, when set, is timed instead of a child process.
	inProc func(ctx context.Context) error
	seq    atomic.Uint64
}

// Runnable reports whether the contender can be measured.
func (c *Contender) Runnable() bool { return c.Status == report.StatusOK }

// Options configure Build.
type Options struct {
	// Agentrun is the path of the agentrun binary (bin/agentrun).
	Agentrun string
	// Baseline, when set, is the path of an older agentrun build; it adds
	// the BaseNames contenders, which run it. Empty leaves them out.
	Baseline string
	// Only, when non-empty, restricts Build to these names.
	Only []string
}

// Set is the built contenders plus what must be undone afterwards.
type Set struct {
	Contenders []*Contender
	Notes      []string
	tmp        string
	cgroupDirs []string
	closers    []func() error // sessions made for the session contenders
}

// ScratchDir is the set's temporary directory, for short-lived files.
func (s *Set) ScratchDir() string { return s.tmp }

// Close removes the temporary directory and the cgroups created for runc.
func (s *Set) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	for _, d := range s.cgroupDirs {
		if err := removeCgroupTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	if s.tmp != "" {
		if err := os.RemoveAll(s.tmp); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", s.tmp, err))
		}
	}
	return errors.Join(errs...)
}

// ValidateOnly checks -only names against the known contenders.
func ValidateOnly(only []string) error {
	known := map[string]bool{}
	for _, n := range Names() {
		known[n] = true
	}
	for _, n := range only {
		if !known[n] {
			return fmt.Errorf("unknown contender %q (known: %s)", n, strings.Join(Names(), ", "))
		}
	}
	return nil
}

func selected(only []string, name string) bool {
	if len(only) == 0 {
		return true
	}
	for _, n := range only {
		if n == name {
			return true
		}
	}
	return false
}

// Build prepares every selected contender: it finds the tools, creates the
// shared workspace and the runc bundles, and marks what is missing. It only
// fails for problems of the driver itself (no temp dir); a contender that
// cannot be prepared is returned with a non-ok status and the reason.
func Build(ctx context.Context, opt Options) (*Set, error) {
	if err := ValidateOnly(opt.Only); err != nil {
		return nil, err
	}
	if opt.Baseline == "" {
		for _, n := range BaseNames() {
			if len(opt.Only) > 0 && selected(opt.Only, n) {
				return nil, fmt.Errorf("%s needs a baseline build", n)
			}
		}
	}
	tmp, err := os.MkdirTemp("", "spawnbench-")
	if err != nil {
		return nil, fmt.Errorf("create temp dir: %w", err)
	}
	set := &Set{tmp: tmp}
	// The rootless runc contender runs as another user and must traverse it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		set.Close()
		return nil, fmt.Errorf("chmod temp dir: %w", err)
	}
	ws := filepath.Join(tmp, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		set.Close()
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	env := os.Environ()

	add := func(c *Contender) {
		if !selected(opt.Only, c.Name) {
			return
		}
		if c.Dir == "" {
			c.Dir = ws
		}
		if c.Env == nil {
			c.Env = env
		}
		if c.Status == "" {
			c.Status = report.StatusOK
		}
		set.Contenders = append(set.Contenders, c)
	}

	add(fixedArgv(&Contender{Name: ForkExec, Label: "bare fork+exec of /bin/true from the driver (os/exec): the floor"},
		"/bin/true"))
	add(tool(&Contender{Name: Unshare, Label: "util-linux unshare with user (root-mapped), mount, PID (+fork), net, UTS and IPC namespaces"},
		"unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net", "--uts", "--ipc", "/bin/true"))
	add(tool(&Contender{Name: Bwrap, Label: "bubblewrap with isolation equivalent to agentrun's default"},
		"bwrap", BwrapArgs(ws, fileExists)...))

	if selected(opt.Only, Runc) {
		add(buildRunc(ctx, set, tmp, false))
	}
	if selected(opt.Only, RuncRootless) {
		add(buildRunc(ctx, set, tmp, true))
	}

	add(agentrunCLI(AgentrunNone, opt.Agentrun, "none"))
	if opt.Baseline != "" && selected(opt.Only, AgentrunNoneBase) {
		add(baseCLI(opt.Baseline, tmp))
	}
	noPre := agentrunCLI(AgentrunNoPrestart, opt.Agentrun, "none")
	noPre.Label = "agentrun-none without prestart (AGENTRUN_PRESTART=0): the init starts after the Go runtime"
	noPre.Env = append(withoutEnv(env, "AGENTRUN_PRESTART"), "AGENTRUN_PRESTART=0")
	noPre.Command = "AGENTRUN_PRESTART=0 " + noPre.Command
	add(noPre)
	noX := agentrunCLI(AgentrunNoExpress, opt.Agentrun, "none")
	noX.Label = "agentrun-none without the express path (AGENTRUN_EXPRESS=0): Go finishes each prestart hit"
	noX.Env = append(withoutEnv(env, "AGENTRUN_EXPRESS"), "AGENTRUN_EXPRESS=0")
	noX.Command = "AGENTRUN_EXPRESS=0 " + noX.Command
	add(noX)
	add(agentrunCLI(AgentrunHost, opt.Agentrun, "host"))
	if selected(opt.Only, AgentrunUnconfined) {
		add(unconfined(opt.Agentrun, tmp))
	}
	add(inProcessAgentrun(ws))
	if selected(opt.Only, BwrapRootless) || selected(opt.Only, AgentrunRootless) {
		bw, ar := rootlessPair(tmp, opt.Agentrun)
		add(bw)
		add(ar)
	}
	if opt.Baseline != "" && selected(opt.Only, AgentrunRootlessBase) {
		add(rootlessBase(tmp, opt.Baseline))
	}
	if selected(opt.Only, SessionExec) {
		add(sessionExec(set, ws))
	}
	if selected(opt.Only, SessionExecCLI) {
		add(sessionExecCLI(set, opt.Agentrun, ws))
	}
	add(sessionCreate(ws))
	if selected(opt.Only, PoolExec) {
		add(poolExec(set, ws))
	}
	// Show commands without the random temp path, so reports diff cleanly.
	for _, c := range set.Contenders {
		c.Command = strings.ReplaceAll(c.Command, tmp, "$BENCH_TMP")
	}
	return set, nil
}

func fixedArgv(c *Contender, argv ...string) *Contender {
	c.argv = func(uint64) []string { return argv }
	c.Command = strings.Join(argv, " ")
	return c
}

// tool resolves name on PATH; a tool that is not installed makes the
// contender "missing" instead of dropping it.
func tool(c *Contender, name string, args ...string) *Contender {
	path, err := exec.LookPath(name)
	if err != nil {
		c.Status, c.Reason = report.StatusMissing, fmt.Sprintf("%s not installed (run `make bench-deps`)", name)
		c.Command = strings.Join(append([]string{name}, args...), " ")
		return c
	}
	return fixedArgv(c, append([]string{path}, args...)...)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// BwrapArgs builds bubblewrap's arguments for isolation equivalent to
// agentrun's default policy: every namespace, a new session, death with the
// parent, a cleared environment, a read-only /usr with the merged-usr
// symlinks, a few /etc files, fresh /proc, /dev and /tmp, and the workspace
// read-write at /workspace as the working directory. exists decides which
// optional pieces (lib64, /etc files) the host has.
func BwrapArgs(workspace string, exists func(string) bool) []string {
	args := []string{
		"--unshare-all", // user, ipc, pid, net, uts, cgroup
		"--new-session",
		"--die-with-parent",
		"--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
		"--ro-bind", "/usr", "/usr",
	}
	for _, l := range []struct{ target, link string }{
		{"usr/bin", "/bin"}, {"usr/lib", "/lib"}, {"usr/lib64", "/lib64"}, {"usr/sbin", "/sbin"},
	} {
		if exists("/" + l.target) {
			args = append(args, "--symlink", l.target, l.link)
		}
	}
	for _, f := range []string{"passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "ld.so.cache"} {
		p := "/etc/" + f
		if exists(p) {
			args = append(args, "--ro-bind", p, p)
		}
	}
	return append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/tmp",
		"--bind", workspace, "/workspace",
		"--chdir", "/workspace",
		"/bin/true")
}

// agentrunCLI is `agentrun spawn --net MODE -- /bin/true`, run with the
// shared workspace as its working directory (agentrun's default workspace).
func agentrunCLI(name, path, net string, extra ...string) *Contender {
	c := &Contender{Name: name, Label: fmt.Sprintf("agentrun CLI, default policy, network %s", net)}
	argv := append(append([]string{path, "spawn", "--net", net}, extra...), "--", "/bin/true")
	c.Command = strings.Join(argv, " ")
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.Status, c.Reason = report.StatusMissing, fmt.Sprintf("%s not found (build it with `make build`)", path)
		return c
	case err != nil:
		c.Status, c.Reason = report.StatusFailed, fmt.Sprintf("stat %s: %v", path, err)
		return c
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		c.Status, c.Reason = report.StatusFailed, fmt.Sprintf("%s is not an executable file", path)
		return c
	}
	if abs, err := filepath.Abs(path); err == nil {
		argv[0] = abs // the child runs in the workspace, so a relative path would break
	}
	c.argv = func(uint64) []string { return argv }
	return c
}

// unconfined is agentrun-none with --seccomp-profile unconfined. As root,
// agentrun refuses that over a root-owned workspace (the filter is what
// stops setuid files there), so this contender gets a workspace owned by
// nobody.
func unconfined(path, tmp string) *Contender {
	c := agentrunCLI(AgentrunUnconfined, path, "none", "--seccomp-profile", "unconfined")
	c.Label = "agentrun CLI, network none, no seccomp filter (--seccomp-profile unconfined)"
	if c.Status != "" {
		return c
	}
	ws := filepath.Join(tmp, "workspace-unconfined")
	if err := os.Mkdir(ws, 0o755); err != nil {
		c.Status, c.Reason = report.StatusFailed, err.Error()
		return c
	}
	if os.Geteuid() == 0 {
		uid, gid, _ := unprivilegedIDs()
		if err := os.Chown(ws, uid, gid); err != nil {
			c.Status, c.Reason = report.StatusFailed, err.Error()
			return c
		}
	}
	c.Dir = ws
	return c
}

// baseCLI is agentrun-none run with the baseline build. It gets a
// workspace of its own: the prestart cache is keyed by the working directory
// and the flags, not by the binary, so two builds in one directory would
// replace each other's cached plan and neither would take its fast path.
func baseCLI(path, tmp string) *Contender {
	c := agentrunCLI(AgentrunNoneBase, path, "none")
	c.Label = "agentrun-none run with the baseline build (-baseline)"
	if c.Status != "" {
		return c
	}
	ws := filepath.Join(tmp, "workspace-base")
	if err := os.Mkdir(ws, 0o755); err != nil {
		c.Status, c.Reason = report.StatusFailed, err.Error()
		return c
	}
	c.Dir = ws
	return c
}

// inProcessAgentrun times agentrun.Run called from this process: the
// library path of agent runners, with no CLI start-up, and the seccomp
// program compiled once and kept in memory as a long-lived runner would.
func inProcessAgentrun(ws string) *Contender {
	cache := &seccomp.Cache{}
	policy := agentrun.Policy{Workspace: ws, Network: agentrun.NetworkNone, Command: []string{"/bin/true"}}
	return &Contender{
		Name:    AgentrunAPI,
		Label:   "agentrun through the Go API in-process (agentrun.Run)",
		Status:  report.StatusOK,
		Command: "agentrun.Run(Policy{Workspace: ws, Command: [/bin/true]})",
		inProc: func(ctx context.Context) error {
			p := policy
			res, err := agentrun.Run(ctx, &p, agentrun.Options{SeccompCache: cache})
			if err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return fmt.Errorf("exit %d", res.ExitCode)
			}
			return nil
		},
	}
}

// rootlessPair builds bwrap and agentrun-none as run by an unprivileged
// user: their own workspace owned by that user and, when the driver is
// root, a copy of the agentrun binary that user can reach. Without cgroup
// delegation agentrun then runs without a cgroup, as it would for that
// user (its result says limits "none").
func rootlessPair(tmp, agentrunPath string) (bw, ar *Contender) {
	bw = &Contender{Name: BwrapRootless, Label: "bubblewrap as bwrap, run by an unprivileged user"}
	const arLabel = "agentrun CLI, default policy, network none, run by an unprivileged user"
	u, err := newRootlessUser(tmp, "rootless")
	if err != nil {
		ar = &Contender{Name: AgentrunRootless, Label: arLabel}
		for _, c := range []*Contender{bw, ar} {
			c.Status, c.Reason = report.StatusFailed, err.Error()
		}
		return bw, ar
	}
	bw = tool(bw, "bwrap", BwrapArgs(u.ws, fileExists)...)
	u.apply(bw)
	ar = u.agentrun(AgentrunRootless, agentrunPath, "agentrun-rootless")
	ar.Label = arLabel
	u.apply(ar)
	return bw, ar
}

// rootlessBase is agentrun-rootless run with the baseline build, in a
// workspace and runtime directory of its own (see baseCLI).
func rootlessBase(tmp, path string) *Contender {
	const label = "agentrun-rootless run with the baseline build (-baseline)"
	u, err := newRootlessUser(tmp, "rootless-base")
	if err != nil {
		return &Contender{Name: AgentrunRootlessBase, Label: label, Status: report.StatusFailed, Reason: err.Error()}
	}
	c := u.agentrun(AgentrunRootlessBase, path, "agentrun-rootless-base")
	c.Label = label
	u.apply(c)
	return c
}

// rootlessUser is what a contender run by an unprivileged user needs: the
// user, and a workspace and runtime directory that user owns.
type rootlessUser struct {
	uid, gid int
	asOther  bool // the driver is root, so the contender runs as nobody
	tmp      string
	ws, xdg  string
}

// newRootlessUser creates the user's workspace and runtime directory in
// tmp, named after tag. agentrun's state (the seccomp disk cache, the
// prestart cache) goes to that runtime directory, so that the set's Close
// removes it.
func newRootlessUser(tmp, tag string) (*rootlessUser, error) {
	u := &rootlessUser{tmp: tmp, ws: filepath.Join(tmp, "workspace-"+tag), xdg: filepath.Join(tmp, "xdg-"+tag)}
	u.uid, u.gid, u.asOther = unprivilegedIDs()
	if err := os.Mkdir(u.ws, 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(u.xdg, 0o700); err != nil {
		return nil, err
	}
	if u.asOther {
		for _, d := range []string{u.ws, u.xdg} {
			if err := os.Chown(d, u.uid, u.gid); err != nil {
				return nil, err
			}
		}
	}
	return u, nil
}

// agentrun is agentrun-none of the binary at path, run by the user. When
// the driver is root the binary is copied into tmp as copyName first: the
// build tree may not be reachable by that user.
func (u *rootlessUser) agentrun(name, path, copyName string) *Contender {
	bin := path
	var copyErr error
	if u.asOther {
		bin = filepath.Join(u.tmp, copyName)
		b, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(bin, b, 0o755)
		}
		copyErr = err
	}
	c := agentrunCLI(name, bin, "none")
	if copyErr != nil && c.Status == "" {
		c.Status, c.Reason = report.StatusFailed, fmt.Sprintf("copy agentrun for the unprivileged user: %v", copyErr)
	}
	return c
}

// apply runs c as the user, in the user's workspace and runtime directory.
func (u *rootlessUser) apply(c *Contender) {
	c.Dir = u.ws
	c.Env = append(withoutEnv(os.Environ(), "XDG_RUNTIME_DIR"), "XDG_RUNTIME_DIR="+u.xdg)
	if u.asOther {
		c.Cred = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}
		c.Label += fmt.Sprintf(" (uid %d)", u.uid)
	}
}

// unprivilegedIDs returns the uid/gid rootless runc runs as: the caller's own
// when not root, else nobody's (65534 when it has no passwd entry).
func unprivilegedIDs() (uid, gid int, asOther bool) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), os.Getegid(), false
	}
	uid, gid = 65534, 65534
	if u, err := user.Lookup("nobody"); err == nil {
		if v, err := strconv.Atoi(u.Uid); err == nil {
			uid = v
		}
		if v, err := strconv.Atoi(u.Gid); err == nil {
			gid = v
		}
	}
	return uid, gid, true
}
