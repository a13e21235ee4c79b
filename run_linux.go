//go:build linux

package agentrun

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/cgroups"
	"github.com/agentrun/agentrun/internal/statedir"
	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/probe"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// NewHostInfo reads what Compile needs from the running system.
func NewHostInfo(p *Policy) (*HostInfo, error) {
	return hostInfoWith(p, &HostInfo{Lstat: os.Lstat, Readlink: os.Readlink, Resolve: filepath.EvalSymlinks, Owner: owner, ReadFile: os.ReadFile})
}

// hostInfoWith fills in h's ids, environment and workspace, the latter
// through h's own host reads.
func hostInfoWith(p *Policy, h *HostInfo) (*HostInfo, error) {
	ws, err := p.resolveWorkspace(h.Resolve, h.Lstat)
	if err != nil {
		return nil, err
	}
	h.UID, h.GID, h.Workspace, h.Environ = os.Geteuid(), os.Getegid(), ws, os.Environ()
	if h.WorkspaceUID, h.WorkspaceGID, err = h.Owner(ws); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrWorkspace, err)
	}
	h.StateRoots = stateRoots(h.UID, h.Resolve)
	h.StateIDs, h.StateChain = stateIDs(h.StateRoots, os.Lstat)
	return h, nil
}

// stateIDs returns the identities of the roots that exist and of every
// directory from each root (or its deepest existing ancestor) up to "/".
func stateIDs(roots []string, lstat func(string) (fs.FileInfo, error)) (ids, chain map[FileID]string) {
	ids, chain = map[FileID]string{}, map[FileID]string{}
	for _, r := range roots {
		for p := r; ; p = filepath.Dir(p) {
			if fi, err := lstat(p); err == nil {
				if id, ok := fileID(fi); ok {
					if p == r {
						ids[id] = r
					}
					if _, seen := chain[id]; !seen {
						chain[id] = r
					}
				}
			}
			if p == filepath.Dir(p) {
				break
			}
		}
	}
	return ids, chain
}

// stateRoots resolves statedir.Candidates for euid. A root that does not
// exist yet is guarded by its path, with its parents' symlinks resolved as
// far as they exist.
func stateRoots(euid int, resolve func(string) (string, error)) []string {
	var out []string
	for _, r := range statedir.Candidates(euid) {
		out = append(out, filepath.Clean(resolveExisting(r, resolve)))
	}
	return out
}

// resolveExisting resolves p, or its deepest ancestor that resolves and
// the rest of p below it.
func resolveExisting(p string, resolve func(string) (string, error)) string {
	if t, err := resolve(p); err == nil && filepath.IsAbs(t) {
		return t
	}
	if dir := filepath.Dir(p); dir != p {
		return filepath.Join(resolveExisting(dir, resolve), filepath.Base(p))
	}
	return p
}

// stateMountErr is Compile's check of binds against the state roots for a
// spec that did not come from a Policy (RunSpec).
func stateMountErr(spec *specs.Spec) error {
	h := &HostInfo{StateRoots: stateRoots(os.Geteuid(), filepath.EvalSymlinks), Lstat: os.Lstat, Resolve: filepath.EvalSymlinks}
	h.StateIDs, h.StateChain = stateIDs(h.StateRoots, os.Lstat)
	for _, m := range spec.Mounts {
		if m.Type != "bind" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
			continue
		}
		src := m.Source
		if t, err := filepath.EvalSymlinks(src); err == nil {
			src = t
		}
		if err := stateBindErr(h, src, m.Destination); err != nil {
			return err
		}
	}
	return nil
}

func owner(path string) (int, int, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, 0, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid), nil
}

// Run executes the policy's command in a fresh sandbox and waits for it.
// A sandbox that cannot be built returns a *SetupError; a command that ran
// returns a Result whatever its status.
func Run(ctx context.Context, p *Policy, opts Options) (*Result, error) {
	start := time.Now()
	fw, err := forwarder(opts)
	if err != nil {
		return nil, err
	}
	if !opts.KeepSignals {
		defer fw.Stop()
	}
	var rec *hostRecorder
	var host *HostInfo
	if opts.Express {
		rec = &hostRecorder{}
		host, err = recordedHostInfo(p, rec)
	} else {
		host, err = NewHostInfo(p)
	}
	if err != nil {
		return nil, &SetupError{Step: "workspace", Err: err}
	}
	spec, err := Compile(p, host)
	if err != nil {
		return nil, &SetupError{Step: "policy", Err: err}
	}
	return runSpec(ctx, spec, time.Duration(p.Timeout), opts, start, fw, rec)
}

// forwarder takes over Options.ForwardSignals for the whole spawn, so a
// signal that arrives while the sandbox is built is held for the command
// instead of ending this process. Nil (whose Stop does nothing) when
// there are none.
func forwarder(opts Options) (*nsinit.Forwarder, error) {
	if len(opts.ForwardSignals) == 0 {
		return nil, nil
	}
	if opts.Signals != nil {
		return nil, &SetupError{Step: "signals", Err: errors.New("set Options.Signals or Options.ForwardSignals, not both")}
	}
	sigs := make([]syscall.Signal, 0, len(opts.ForwardSignals))
	for _, s := range opts.ForwardSignals {
		sig, ok := s.(syscall.Signal)
		if !ok {
			return nil, &SetupError{Step: "signals", Err: fmt.Errorf("cannot forward %v", s)}
		}
		sigs = append(sigs, sig)
	}
	fw, err := nsinit.ForwardSignals(sigs)
	if err != nil {
		return nil, &SetupError{Step: "signals", Err: err}
	}
	return fw, nil
}

// sandboxCgroup creates the sandbox's cgroup. Requested limits that this
// host or caller cannot enforce fail closed. A default pids limit applies
// unless the spec sets one; without requested limits it applies wherever
// cgroups are usable, and the sandbox runs without a cgroup (reported as
// limits "none") where they are not.
//
// limitsOnly: nothing reads the usage, and the kernel ends the sandbox
// through its PID namespace, so a v1 sandbox needs only the hierarchies
// that enforce its limits (cgroups.Options.LimitsOnly).
//
// und, set only with no cgroup, is that outcome's reason when the express
// path can re-check it (cgroups.Undelegated).
func sandboxCgroup(spec *specs.Spec, limitsOnly bool) (cg *cgroups.Cgroup, und *cgroups.Undelegated, err error) {
	var requested *specs.LinuxResources
	if spec.Linux != nil {
		requested = spec.Linux.Resources
	}
	// The holder keeps a rootless caller's transient systemd scope alive
	// (see cgroups/scope_linux.go).
	mgr, err := cgroups.NewManager(cgroups.Options{ScopeHolder: nsinit.HoldCommand, LimitsOnly: limitsOnly})
	if err != nil {
		if requested != nil {
			return nil, nil, err
		}
		return nil, nil, nil
	}
	// Leftovers of runtimes killed with SIGKILL; nothing to do is one ReadDir.
	_, _ = mgr.Sweep()
	// The default pids limit also applies next to the limits a policy sets
	// (--memory alone must not leave fork bombs unbounded). A spec that
	// says something about pids, "unlimited" (0 or -1) included, keeps it.
	res := requested
	if res == nil || res.Pids == nil || res.Pids.Limit == nil {
		var r specs.LinuxResources
		if res != nil {
			r = *res
		}
		limit := int64(cgroups.DefaultPidsLimit)
		r.Pids = &specs.LinuxPids{Limit: &limit}
		res = &r
	}
	// The id only has to be unique (mkdir and the state record refuse a
	// taken one): math/rand's generator, seeded by the runtime, costs no
	// system call, where crypto/rand's first use sets up per-thread state.
	id := fmt.Sprintf("sbx-%d-%016x", os.Getpid(), rand.Uint64())
	cg, err = mgr.Create(id, res)
	var unusable *cgroups.UnusableError
	if err != nil && errors.As(err, &unusable) && res != requested {
		// The default cannot apply here (no usable pids controller):
		// what was requested still must, and nothing else.
		if requested == nil {
			if u, ok := mgr.Undelegated(); ok {
				und = &u
			}
			return nil, und, nil
		}
		cg, err = mgr.Create(id, requested)
		return cg, nil, err
	}
	return cg, nil, err
}

// rootTemplate returns spec with its root bound from a root template
// (mounts/template_linux.go), and the template, held, or spec and nil when
// it gets none. A template only saves work: without one the root is built
// in a fresh tmpfs, as strong, so the reasons not to use one are not
// errors.
func rootTemplate(spec *specs.Spec, opts Options, rec *hostRecorder) (*specs.Spec, *mounts.Template) {
	if v := os.Getenv("AGENTRUN_TEMPLATE"); opts.NoRootTemplate || v == "0" || v == "off" ||
		spec.Root != nil || spec.Annotations[mounts.AnnotationRootfs] != "tmpfs" {
		return spec, nil
	}
	euid := os.Geteuid()
	root := statedir.Root(euid)
	// Not in the fallback state directory in $TMPDIR: cleaners age files
	// out there, the empty mount points first, and the template would
	// break under sandboxes. /run and $XDG_RUNTIME_DIR have none.
	if euid != 0 && root != filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "agentrun") {
		return spec, nil
	}
	// The init opens the template by its path. A rootless init is the
	// caller, and the state directory its own; a root-mode init is an id
	// of the sandbox's range, which may pass through but not list a
	// directory of root's. The locks stay private in either case.
	dir, mode, locks := filepath.Join(root, "templates"), os.FileMode(0o700), filepath.Join(root, "template-locks")
	if euid == 0 {
		dir, mode = root+"-templates", 0o711
	}
	if writesTo(spec, dir) {
		// It would write to every other sandbox's root.
		return spec, nil
	}
	// From here on, a spawn goes without its template only for a passing
	// reason (a file changed a moment ago, a lock someone holds). Its
	// plan must not become an express record, which would keep the
	// slower tmpfs root for every later spawn with the same flags.
	passing := func(err error) (*specs.Spec, *mounts.Template) {
		slog.Debug("agentrun: no root template", "reason", err)
		if rec != nil {
			rec.unsupported = true
		}
		return spec, nil
	}
	skel, err := mounts.SkeletonOf(spec, time.Now())
	var nt *mounts.NotTemplatableError
	if errors.As(err, &nt) && !nt.Passing {
		// This spec never gets one: its tmpfs root is the plan.
		slog.Debug("agentrun: no root template", "reason", err)
		return spec, nil
	}
	if err != nil {
		return passing(err)
	}
	if err := templateDirs(euid, dir, mode, locks); err != nil {
		return passing(err)
	}
	t, err := mounts.AcquireTemplate(dir, locks, skel)
	if err != nil {
		return passing(err)
	}
	if rec != nil {
		// The express path opens the template by its path: a template
		// swept and built again there is another directory.
		if _, err := rec.lstat(t.Dir); err != nil {
			rec.unsupported = true
		}
	}
	return skel.Spec(spec, t), t
}

// templateDirs makes the directories of the templates and their locks.
// Their paths must hold no symlink: the init and start_core open them
// without following any.
func templateDirs(euid int, dir string, mode os.FileMode, locks string) error {
	for _, d := range []string{dir, locks} {
		if err := statedir.Ensure(d, euid); err != nil {
			return err
		}
		if real, err := filepath.EvalSymlinks(d); err != nil || real != d {
			return fmt.Errorf("the path %s holds a symlink", d)
		}
	}
	// Ensure made it 0700; a root-mode init passes through (0711).
	if fi, err := os.Lstat(dir); err != nil || fi.Mode().Perm() == mode {
		return err
	}
	return os.Chmod(dir, mode)
}

// writesTo reports whether a read-write bind of spec holds dir, or lies
// in it.
func writesTo(spec *specs.Spec, dir string) bool {
	for _, m := range spec.Mounts {
		if m.Type == "bind" && !slices.Contains(m.Options, "ro") && (statedir.Within(dir, m.Source) || statedir.Within(m.Source, dir)) {
			return true
		}
	}
	return false
}

// memoryLimited reports whether the spec sets a memory limit, whose OOM
// kills Stats tells.
func memoryLimited(spec *specs.Spec) bool {
	if spec.Linux == nil || spec.Linux.Resources == nil || spec.Linux.Resources.Memory == nil {
		return false
	}
	l := spec.Linux.Resources.Memory.Limit
	return l != nil && *l > 0
}

func syscallViolation(e seccomp.Event) Violation {
	return Violation{Kind: "syscall", Name: e.Name, Detail: e.Detail, Suggestion: e.Suggestion}
}

// RunSpec executes a compiled Spec. start is when the caller began timing.
func RunSpec(ctx context.Context, spec *specs.Spec, timeout time.Duration, opts Options, start time.Time) (*Result, error) {
	// Compile checks the binds of a Policy; a spec from elsewhere here.
	if err := stateMountErr(spec); err != nil {
		return nil, err
	}
	fw, err := forwarder(opts)
	if err != nil {
		return nil, err
	}
	if !opts.KeepSignals {
		defer fw.Stop()
	}
	return runSpec(ctx, spec, timeout, opts, start, fw, nil)
}

// runSpec runs spec; rec, when set, holds the host reads its plan came
// from, for the express record (Options.Express).
func runSpec(ctx context.Context, spec *specs.Spec, timeout time.Duration, opts Options, start time.Time, fw *nsinit.Forwarder, rec *hostRecorder) (*Result, error) {
	// The cgroup is made while nsinit prepares the mounts; the clone waits
	// for it (CgroupReady).
	type made struct {
		cg    *cgroups.Cgroup
		und   *cgroups.Undelegated
		place *nsinit.CgroupPlacement
		err   error
	}
	madeCh := make(chan made, 1)
	go func() {
		cg, und, err := sandboxCgroup(spec, opts.SkipUsage && nsinit.HasNamespace(spec, specs.PIDNamespace))
		if err != nil || cg == nil {
			madeCh <- made{und: und, err: err}
			return
		}
		tasks, err := cg.OpenTasks()
		if err != nil {
			_ = cg.Delete()
			madeCh <- made{err: err}
			return
		}
		madeCh <- made{cg: cg, place: &nsinit.CgroupPlacement{FD: cg.FD(), Add: cg.Add, Tasks: tasks}}
	}()
	cgroup := sync.OnceValue(func() made { return <-madeCh })
	defer func() {
		m := cgroup()
		if m.place != nil {
			for _, f := range m.place.Tasks {
				f.Close()
			}
		}
		if m.cg != nil {
			_ = m.cg.Delete()
		}
	}()

	// A copy of spec: the cgroup's goroutine reads spec meanwhile.
	initSpec, tmpl := rootTemplate(spec, opts, rec)
	if tmpl != nil {
		// Held until the sandbox is gone; the init holds its own copy.
		defer tmpl.Close()
	}
	if opts.SeccompCache == nil {
		opts.SeccompCache = &seccomp.DiskCache{Dir: filepath.Join(statedir.Root(os.Geteuid()), "seccomp")}
	}
	var warned atomic.Bool
	warn := func(m string) {
		warned.Store(true)
		if opts.Warn != nil {
			opts.Warn(m)
		}
	}
	cfg := &nsinit.Config{
		Spec: initSpec, Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
		Warn: warn, UsernsBlocker: probe.UsernsBlockerFor,
		SeccompCache: opts.SeccompCache, Forwarder: fw,
		// Every start path asks for the placement before it lets the
		// command start, so StartAfter is waited for here too.
		CgroupReady: func() (*nsinit.CgroupPlacement, error) {
			if err := awaitStartAfter(ctx, opts.StartAfter); err != nil {
				return nil, err
			}
			m := cgroup()
			if m.err != nil {
				return nil, m.err
			}
			return m.place, nil
		},
	}
	if rec != nil && ctx.Done() == nil {
		cfg.Express = func() *nsinit.Express {
			m := cgroup()
			return expressFor(spec, int64(timeout), opts, rec, m.cg, m.und, warned.Load())
		}
	}
	// Reports are collected unless the caller skips them; the listener
	// answers EPERM, the same as the plain filter does.
	if !opts.SkipViolations || opts.OnViolation != nil {
		cfg.OnViolation = func(e seccomp.Event) {
			if opts.OnViolation != nil {
				opts.OnViolation(syscallViolation(e))
			}
		}
	}
	proc, err := nsinit.Start(cfg)
	if m := cgroup(); m.err != nil {
		return nil, &SetupError{Step: "cgroups", Err: m.err}
	}
	if err != nil {
		var se *nsinit.StepError
		if errors.As(err, &se) {
			return nil, &SetupError{Step: se.Step, Err: errors.New(se.Msg)}
		}
		return nil, &SetupError{Step: "start", Err: err}
	}
	cg := cgroup().cg

	var timedOut atomic.Bool
	stop := make(chan struct{})
	defer close(stop)
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-timer:
				timedOut.Store(true)
				_ = proc.Kill()
			case <-ctx.Done():
				_ = proc.Kill()
				return
			case s, ok := <-opts.Signals:
				if !ok {
					opts.Signals = nil
					continue
				}
				if sig, ok := s.(syscall.Signal); ok {
					_ = proc.Signal(sig)
				}
			}
		}
	}()

	exit, err := proc.Wait()
	if err != nil {
		return nil, err
	}
	res := &Result{ExitCode: exit.Code, Signal: exit.Signal, Limits: "none", Seccomp: spec.Annotations[AnnotationSeccomp], Prestart: proc.Prestart()}
	if c := spec.Process.Capabilities; c != nil {
		res.Capabilities = c.Ambient
	}
	switch {
	case spec.Linux == nil || spec.Linux.Seccomp == nil:
		res.ViolationsStatus = "unavailable: no seccomp filter (unconfined)"
	case cfg.OnViolation == nil:
		res.ViolationsStatus = "skipped"
	default:
		res.ViolationsStatus = "collected"
	}
	for _, e := range proc.Violations() {
		res.Violations = append(res.Violations, syscallViolation(e))
	}
	if cg != nil {
		// With a PID namespace nothing of the sandbox outlives init: the
		// kernel kills and reaps the namespace before init's exit is
		// reported. Without one, the cgroup kill takes down what is left,
		// and must precede the stats.
		if !nsinit.HasNamespace(spec, specs.PIDNamespace) {
			_ = cg.Kill()
		}
		res.Limits = "cgroup-v1"
		if cg.V2() {
			res.Limits = "cgroup-v2"
		}
		// With SkipUsage only the sandbox's own memory limit is read for
		// OOM kills: without one the sandbox is in no memory cgroup of
		// its own, and an outer limit's kill shows as the signal alone.
		if !opts.SkipUsage || memoryLimited(spec) {
			if st, err := cg.Stats(); err == nil {
				res.OOMKilled = st.OOMKilled
				if !opts.SkipUsage {
					res.MemoryPeakBytes, res.CPUUsageUS, res.PidsPeak = st.MemoryPeakBytes, st.CPUUsageUS, st.PidsPeak
				}
			}
		}
	}
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	if timedOut.Load() {
		res.TimedOut = true
		res.ExitCode = ExitTimeout
	}
	return res, nil
}
