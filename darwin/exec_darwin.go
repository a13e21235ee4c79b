//go:build darwin

package darwin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// probeTimeout bounds the confirmation run of a suspected setup failure.
const probeTimeout = 10 * time.Second

// Exec runs l.Argv under l.Profile through sandbox-exec and waits for it.
// A sandbox that cannot be built is returned as a *SetupFailure; a command
// that ran, or could not be found or executed (127/126), is a Finished.
// The command's stderr is always a pipe through the StderrFilter, since
// sandbox-exec writes its own messages there before the command starts.
func Exec(ctx context.Context, l Launch) (*Finished, error) {
	args, err := Args(l.Profile, l.Argv)
	if err != nil {
		return nil, &SetupFailure{Step: "command", Err: err}
	}
	if err := CheckExecSize(args, l.Env); err != nil {
		return nil, &SetupFailure{Step: "sandbox-exec arguments", Err: err}
	}
	if err := MarkInheritedCloseOnExec("/dev/fd"); err != nil {
		return nil, &SetupFailure{Step: "file descriptors", Err: err}
	}
	col := startCollection(l)
	filter := NewStderrFilter(l.Stdio.Err)
	cmd := &exec.Cmd{Path: SandboxExecPath, Args: args, Env: l.Env, Dir: l.Dir}
	streams := Stdio{In: l.Stdio.In, Out: l.Stdio.Out, Err: filter}
	exit, timedOut, err := Supervise(ctx, cmd, streams, l.Supervision)
	ended := time.Now()
	if err != nil {
		col.stop(0)
		return nil, &SetupFailure{Step: "sandbox-exec", Err: err}
	}
	cls := Classify(exit, timedOut, filter.Held(), l.Argv[0])
	if cls.Verdict == SuspectSetup {
		if failure := confirmSetup(ctx, l); failure != nil {
			_ = filter.Finish(true)
			col.stop(0)
			return nil, failure
		}
	}
	_ = filter.Finish(false)
	return &Finished{Outcome: cls.Outcome, Violations: col.stop(l.CollectDrain), Ended: ended}, nil
}

// collection wraps a Collector that may not exist.
type collection struct {
	c      *Collector
	failed Collection
}

func startCollection(l Launch) *collection {
	if !l.Collect {
		return &collection{failed: Collection{Reason: "not requested"}}
	}
	c, err := StartCollector(LogPath, l.Profile.Tag)
	if err != nil {
		return &collection{failed: Collection{Reason: err.Error()}}
	}
	return &collection{c: c}
}

func (c *collection) stop(drain time.Duration) Collection {
	if c.c == nil {
		return c.failed
	}
	return c.c.Stop(drain)
}

// confirmSetup runs /usr/bin/true under the same profile. If that fails
// too, the sandbox itself cannot be built and the failure says why; if it
// succeeds, the sandbox-exec error came from the command (which ran a
// sandbox-exec of its own) and nil is returned.
func confirmSetup(ctx context.Context, l Launch) *SetupFailure {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	args, err := Args(l.Profile, []string{"/usr/bin/true"})
	if err != nil {
		return &SetupFailure{Step: "seatbelt", Err: err}
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, SandboxExecPath, args[1:]...)
	cmd.Env, cmd.Dir, cmd.Stderr = l.Env, l.Dir, &stderr
	err = cmd.Run()
	if err == nil {
		return nil
	}
	var lines []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if isLauncherLine(line) && !isDeprecationBanner(line) {
			lines = append(lines, line)
		}
	}
	if len(lines) > 0 {
		return FailureFromLines(lines)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &SetupFailure{Step: "seatbelt", Err: fmt.Errorf("probe /usr/bin/true under the profile failed: %v", ee)}
	}
	return &SetupFailure{Step: "seatbelt", Err: fmt.Errorf("probe run: %w", err)}
}
