//go:build linux

package agentrun

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/statedir"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/probe"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// NewHostInfo reads what Compile needs from the running system.
func NewHostInfo(p *Policy) (*HostInfo, error) {
	return NewHostInfoWith(p, &HostInfo{Lstat: os.Lstat, Readlink: os.Readlink, Resolve: filepath.EvalSymlinks, Owner: owner, ReadFile: os.ReadFile})
}

// NewHostInfoWith is NewHostInfo reading the host through h's functions
// (Lstat, Readlink, Resolve, Owner and ReadFile, all set): it fills in h's
// ids, environment and workspace and returns h.
func NewHostInfoWith(p *Policy, h *HostInfo) (*HostInfo, error) {
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
	return RunWith(ctx, p, opts, Hooks{})
}

// Hooks are what a program may add to a one-shot run below its Options,
// on Linux: the agentrun CLI forwards its own signals and adopts inits its
// constructor started.
type Hooks struct {
	// Host, when set, is the HostInfo whose read functions the Policy is
	// compiled with (NewHostInfoWith). The CLI records the reads for its
	// express path.
	Host *HostInfo
	// Forwarder, installed by the caller (nsinit.ForwardSignals) before
	// the run, passes the signals it took over on to the command; the
	// caller stops it.
	Forwarder *nsinit.Forwarder
	// Prestart offers the run an init the program started before its Go
	// runtime (lifecycle.Options.Prestart).
	Prestart lifecycle.Prestart
}

// RunWith is Run with Hooks.
func RunWith(ctx context.Context, p *Policy, opts Options, h Hooks) (*Result, error) {
	start := time.Now()
	var host *HostInfo
	var err error
	if h.Host != nil {
		host, err = NewHostInfoWith(p, h.Host)
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
	return runSpec(ctx, spec, time.Duration(p.Timeout), opts, start, h)
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
	return runSpec(ctx, spec, timeout, opts, start, Hooks{})
}

// runSpec runs spec in an anonymous sandbox of the lifecycle: created,
// started, waited for and deleted.
func runSpec(ctx context.Context, spec *specs.Spec, timeout time.Duration, opts Options, start time.Time, h Hooks) (*Result, error) {
	lo := lifecycle.Options{
		Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
		Warn: opts.Warn, UsernsBlocker: probe.UsernsBlockerFor,
		SeccompCache: opts.SeccompCache, Forwarder: h.Forwarder, Prestart: h.Prestart,
		LimitsOnly: opts.SkipUsage, NoRootTemplate: opts.NoRootTemplate,
	}
	// Reports are collected unless the caller skips them; the listener
	// answers EPERM, the same as the plain filter does.
	watched := !opts.SkipViolations || opts.OnViolation != nil
	if watched {
		lo.OnViolation = func(e seccomp.Event) {
			if opts.OnViolation != nil {
				opts.OnViolation(syscallViolation(e))
			}
		}
	}
	sb, err := lifecycle.Create(ctx, spec, lo)
	if err != nil {
		return nil, setupError(err)
	}
	defer sb.Delete()
	if err := awaitStartAfter(ctx, opts.StartAfter); err != nil {
		return nil, setupError(err)
	}
	if err := sb.Start(); err != nil {
		return nil, setupError(err)
	}

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
				_ = sb.Kill()
			case <-ctx.Done():
				_ = sb.Kill()
				return
			case s, ok := <-opts.Signals:
				if !ok {
					opts.Signals = nil
					continue
				}
				if sig, ok := s.(syscall.Signal); ok {
					_ = sb.Signal(sig)
				}
			}
		}
	}()

	exit, err := sb.Wait()
	if err != nil {
		return nil, err
	}
	res := &Result{ExitCode: exit.Code, Signal: exit.Signal, Limits: sb.Limits(), Seccomp: spec.Annotations[AnnotationSeccomp], Prestart: sb.Prestart()}
	if c := spec.Process.Capabilities; c != nil {
		res.Capabilities = c.Ambient
	}
	switch {
	case spec.Linux == nil || spec.Linux.Seccomp == nil:
		res.ViolationsStatus = "unavailable: no seccomp filter (unconfined)"
	case !watched:
		res.ViolationsStatus = "skipped"
	default:
		res.ViolationsStatus = "collected"
	}
	for _, e := range sb.Violations() {
		res.Violations = append(res.Violations, syscallViolation(e))
	}
	// With SkipUsage only the sandbox's own memory limit is read for OOM
	// kills: without one the sandbox is in no memory cgroup of its own,
	// and an outer limit's kill shows as the signal alone.
	if !opts.SkipUsage || memoryLimited(spec) {
		if st, ok := sb.Stats(); ok {
			res.OOMKilled = st.OOMKilled
			if !opts.SkipUsage {
				res.MemoryPeakBytes, res.CPUUsageUS, res.PidsPeak = st.MemoryPeakBytes, st.CPUUsageUS, st.PidsPeak
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

// setupError turns the lifecycle's failure to build or start a sandbox,
// a context that ended first included, into a *SetupError.
func setupError(err error) error {
	var se *lifecycle.StepError
	if errors.As(err, &se) {
		return &SetupError{Step: se.Step, Err: se.Err}
	}
	return &SetupError{Step: "start", Err: err}
}
