//go:build darwin

package agentrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentrun/agentrun/darwin"
)

// Run executes the policy's command under a Seatbelt profile built from the
// policy (see package darwin) and waits for it. A sandbox that cannot be
// built returns a *SetupError; a command that ran returns a Result whatever
// its status. Where the policy asks for more than Seatbelt can give
// (resource limits), Run fails closed; where it differs harmlessly (a mount
// destination, a tmpfs), opts.Warn says so.
func Run(ctx context.Context, p *Policy, opts Options) (*Result, error) {
	start := time.Now()
	warn := opts.Warn
	if warn == nil {
		warn = func(string) {}
	}
	if p == nil || len(p.Command) == 0 {
		return nil, errors.New("agentrun: policy has no command")
	}
	launch, cleanup, err := prepareDarwin(p, opts, warn)
	if cleanup != nil {
		defer cleanup()
	}
	if err != nil {
		return nil, err
	}
	if err := awaitStartAfter(ctx, opts.StartAfter); err != nil {
		return nil, err
	}
	fin, err := darwin.Exec(ctx, *launch)
	if err != nil {
		var sf *darwin.SetupFailure
		if errors.As(err, &sf) {
			return nil, &SetupError{Step: sf.Step, Err: sf.Err}
		}
		return nil, err
	}
	return darwinResult(fin, start, warn), nil
}

// prepareDarwin builds the Launch: host facts are read here, everything
// else is decided by the pure functions of package darwin. cleanup removes
// the per-run directory and is set as soon as that directory exists.
func prepareDarwin(p *Policy, opts Options, warn func(string)) (*darwin.Launch, func(), error) {
	if names := darwinLimits(p.Limits).Unenforceable(); len(names) > 0 {
		return nil, nil, &SetupError{Step: "limits", Err: fmt.Errorf("%s cannot be enforced on macOS (Seatbelt has no resource limits); drop them to run here", strings.Join(names, ", "))}
	}
	ws, err := p.ResolveWorkspace()
	if err != nil {
		return nil, nil, &SetupError{Step: "workspace", Err: err}
	}
	mounts, err := darwinMounts(p.Mounts, warn)
	if err != nil {
		return nil, nil, err
	}
	env, err := p.Environ(os.Environ())
	if err != nil {
		return nil, nil, &SetupError{Step: "environment", Err: err}
	}
	tmp, err := os.MkdirTemp("", "agentrun-")
	if err != nil {
		return nil, nil, &SetupError{Step: "temporary directory", Err: err}
	}
	cleanup := func() { _ = os.RemoveAll(tmp) }
	sigs := opts.Signals
	prof, err := darwinProfile(p, ws, tmp, mounts, opts)
	if err != nil {
		return nil, cleanup, err
	}
	for _, w := range prof.Warnings {
		warn(w)
	}
	return &darwin.Launch{
		Profile: prof, Argv: p.Command, Env: darwin.Environ(env, tmp), Dir: ws,
		Stdio: darwin.Stdio{In: opts.Stdin, Out: opts.Stdout, Err: opts.Stderr},
		Supervision: darwin.Supervision{
			Timeout: time.Duration(p.Timeout), Signals: sigs, Drain: darwin.DefaultOutputDrain,
		},
		Collect: true, CollectDrain: darwin.DefaultCollectDrain,
	}, cleanup, nil
}

func darwinProfile(p *Policy, ws, tmp string, mounts []darwin.Mount, opts Options) (*darwin.Profile, error) {
	tag, err := darwin.NewTag()
	if err != nil {
		return nil, &SetupError{Step: "profile", Err: err}
	}
	home, _ := os.UserHomeDir() // no home only means no home-relative secret denies
	spec := darwin.Spec{
		Tag: tag, Workspace: ws, Home: home, TempDirs: []string{tmp}, Mounts: mounts,
		Network:       darwin.NetworkNone,
		Terminals:     darwin.Terminals(opts.Stdin, opts.Stdout),
		TerminalIoctl: os.Geteuid() != 0,
	}
	switch p.Network {
	case NetworkHost:
		spec.Network = darwin.NetworkHost
	case NetworkNone, "":
	default:
		return nil, &SetupError{Step: "network", Err: fmt.Errorf("unknown network mode %q (want none or host)", p.Network)}
	}
	if dev := darwin.DeveloperDir(); dev != "" {
		spec.ExtraSystemRead = []string{dev}
	}
	prof, err := darwin.Compile(spec, darwin.HostResolver)
	if err != nil {
		return nil, &SetupError{Step: "profile", Err: err}
	}
	return prof, nil
}

// darwinMounts checks mount sources as the Linux backend does (absolute,
// existing, not a symlink) and maps the mounts onto Seatbelt grants.
func darwinMounts(ms []Mount, warn func(string)) ([]darwin.Mount, error) {
	reqs := make([]darwin.MountRequest, 0, len(ms))
	for _, m := range ms {
		if m.Mode != MountTmpfs {
			if err := checkDarwinSource(m.Source); err != nil {
				return nil, &SetupError{Step: "mount " + m.Dest, Err: err}
			}
		}
		reqs = append(reqs, darwin.MountRequest{Source: m.Source, Dest: m.Dest, Kind: string(m.Mode)})
	}
	out, warns, err := darwin.TranslateMounts(reqs)
	if err != nil {
		return nil, &SetupError{Step: "mounts", Err: err}
	}
	for _, w := range warns {
		warn(w)
	}
	return out, nil
}

func checkDarwinSource(src string) error {
	if !strings.HasPrefix(src, "/") {
		return fmt.Errorf("mount source %q is not absolute", src)
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("mount source %s does not exist", src)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(src)
		return fmt.Errorf("mount source %s is a symlink (to %s); name the real path", src, target)
	}
	return nil
}

func darwinLimits(l Limits) darwin.Limits {
	return darwin.Limits{
		Memory: int64(l.Memory), Pids: l.Pids, CPUs: l.CPUs, NoFile: l.NoFile,
		FSize: int64(l.FSize), CPUTime: time.Duration(l.CPUTime), NProc: l.NProc,
	}
}

func darwinResult(fin *darwin.Finished, start time.Time, warn func(string)) *Result {
	res := &Result{
		ExitCode: fin.Outcome.ExitCode, Signal: fin.Outcome.Signal, TimedOut: fin.Outcome.TimedOut,
		DurationMS: float64(fin.Ended.Sub(start).Microseconds()) / 1000,
	}
	for _, d := range fin.Violations.Denials {
		v := d.Violation()
		res.Violations = append(res.Violations, Violation{Kind: v.Kind, Name: v.Name, Detail: v.Detail, Suggestion: v.Suggestion})
	}
	// "No violations" is never claimed for a run that could not be watched.
	res.ViolationsStatus = "collected"
	if !fin.Violations.Available {
		res.ViolationsStatus = "unavailable: " + fin.Violations.Reason
		warn("policy violations were not collected: " + fin.Violations.Reason)
	}
	if fin.Violations.Truncated {
		res.ViolationsStatus = "partial"
		warn("more policy violations occurred than were recorded")
	}
	return res
}
