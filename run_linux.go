//go:build linux

package agentrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/nsinit"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// NewHostInfo reads what Compile needs from the running system.
func NewHostInfo(p *Policy) (*HostInfo, error) {
	ws, err := p.ResolveWorkspace()
	if err != nil {
		return nil, err
	}
	h := &HostInfo{
		UID: os.Geteuid(), GID: os.Getegid(),
		Workspace: ws,
		Environ:   os.Environ(),
		Lstat:     os.Lstat,
		Readlink:  os.Readlink,
		Resolve:   filepath.EvalSymlinks,
		Owner:     owner,
	}
	if h.WorkspaceUID, h.WorkspaceGID, err = owner(ws); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrWorkspace, err)
	}
	return h, nil
}

func owner(path string) (int, int, error) {
	fi, err := os.Stat(path)
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
	host, err := NewHostInfo(p)
	if err != nil {
		return nil, &SetupError{Step: "workspace", Err: err}
	}
	spec, err := Compile(p, host)
	if err != nil {
		return nil, &SetupError{Step: "policy", Err: err}
	}
	return RunSpec(ctx, spec, time.Duration(p.Timeout), opts, start)
}

// RunSpec executes a compiled Spec. start is when the caller began timing.
func RunSpec(ctx context.Context, spec *specs.Spec, timeout time.Duration, opts Options, start time.Time) (*Result, error) {
	if spec.Linux != nil && spec.Linux.Resources != nil {
		// Fail closed until cgroup enforcement is wired in.
		return nil, &SetupError{Step: "cgroups", Err: errors.New("--memory, --pids and --cpus need cgroup support, which this build does not have yet")}
	}
	proc, err := nsinit.Start(&nsinit.Config{
		Spec: spec, Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
		Warn: opts.Warn, UsernsBlocker: UsernsBlocker,
	})
	if err != nil {
		var se *nsinit.StepError
		if errors.As(err, &se) {
			return nil, &SetupError{Step: se.Step, Err: errors.New(se.Msg)}
		}
		return nil, &SetupError{Step: "start", Err: err}
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
	res := &Result{ExitCode: exit.Code, Signal: exit.Signal, DurationMS: float64(time.Since(start).Microseconds()) / 1000}
	if timedOut.Load() {
		res.TimedOut = true
		res.ExitCode = ExitTimeout
	}
	return res, nil
}
