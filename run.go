package agentrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/agentrun/agentrun/seccomp"
)

// Exit statuses of the spawn contract.
const (
	ExitTimeout     = 124 // the timeout fired and the sandbox was killed
	ExitSetupFailed = 125 // the sandbox could not be built
)

// Options are the per-run inputs that are not policy: stdio, signals, logging.
type Options struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Signals, when set, are forwarded to the sandboxed command while it
	// runs. A program that wants the signals reaching it forwarded hooks
	// them itself (signal.Notify) and passes the channel.
	Signals <-chan os.Signal
	// StartAfter, when set, holds the command's start until it is closed
	// (or ctx is done); the sandbox is built meanwhile, so a caller can
	// set up what the command needs in parallel.
	StartAfter <-chan struct{}
	// Warn receives one-line warnings (clamped rlimits, weaker modes).
	Warn func(msg string)
	// OnViolation, when set, is called as soon as a policy violation is
	// seen (e.g. to print it); all of them also land in Result.Violations.
	OnViolation func(Violation)
	// SeccompCache compiles seccomp profiles. The default is a cache on
	// disk in agentrun's private state directory, shared by all processes
	// of the caller; pass a *seccomp.Cache to keep it in memory instead.
	SeccompCache seccomp.Compiler
	// SkipUsage says the caller will not read Result's usage fields
	// (MemoryPeakBytes, CPUUsageUS, PidsPeak): they stay zero, and on a
	// cgroup v1 host the sandbox joins only the hierarchies that enforce
	// its limits (cgroups.Options.LimitsOnly), which takes about a
	// millisecond off each spawn. Limits and every isolation property are
	// the same, and so is the exit status. OOMKilled then reports kills by
	// the sandbox's own memory limit only; one by an outer limit (the
	// caller's cgroup) shows as the SIGKILL alone.
	SkipUsage bool
	// SkipViolations says the caller will not read Result.Violations and
	// sets no OnViolation. On Linux the filter then denies with EPERM itself
	// instead of through a user-notification listener in this process,
	// which saves the listener and its goroutine. The command sees the
	// same EPERM; ViolationsStatus says "skipped".
	SkipViolations bool
	// NoRootTemplate builds the root in a fresh tmpfs on every spawn
	// instead of binding a root template, the fixed part of the root kept
	// in the state directory (mounts/template_linux.go). The environment
	// variable AGENTRUN_TEMPLATE=0 does the same.
	NoRootTemplate bool
}

// Violation is a policy violation observed during a run.
type Violation struct {
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Detail     string `json:"detail,omitempty"`
	Suggestion string `json:"suggestion,omitempty"`
}

// Result describes how a sandboxed command ended.
type Result struct {
	// ExitCode follows the spawn contract: the command's own status,
	// 128+N when killed by signal N, 124 on timeout.
	ExitCode int `json:"exit_code"`
	// Signal is the signal number that killed the command, or 0.
	Signal     int     `json:"signal"`
	TimedOut   bool    `json:"timed_out"`
	DurationMS float64 `json:"duration_ms"`
	// Limits says what enforced the resource limits: "cgroup-v2",
	// "cgroup-v1", or "none" when no cgroup could be used and none was
	// requested.
	Limits string `json:"limits,omitempty"`
	// OOMKilled reports whether the kernel's OOM killer killed a process
	// of the sandbox (the command itself when Signal is 9; ExitCode stays
	// the command's own status either way).
	OOMKilled       bool   `json:"oom_killed"`
	MemoryPeakBytes uint64 `json:"memory_peak_bytes,omitempty"`
	CPUUsageUS      uint64 `json:"cpu_usage_us,omitempty"`
	PidsPeak        uint64 `json:"pids_peak,omitempty"`
	// Capabilities the command held (--cap-add); none by default.
	Capabilities []string `json:"capabilities,omitempty"`
	// Seccomp is the filter that applied: "default", "unconfined" or
	// "file:PATH".
	Seccomp    string      `json:"seccomp,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
	// ViolationsStatus says whether Violations is complete: "collected",
	// "partial", "skipped" (Options.SkipViolations), or
	// "unavailable: REASON" when the run could not be watched (so an
	// empty list is not read as a clean run).
	ViolationsStatus string `json:"violations_status,omitempty"`
	// Prestart says whether the CLI built this sandbox from a plan cached
	// by an earlier spawn while its Go runtime started: "hit", "miss" (none
	// cached yet; cached now), "mismatch" (the cached plan was not this
	// spawn's; spawned afresh), or empty when the caller does not
	// prestart (Hooks.Prestart; library callers normally do not).
	Prestart string `json:"prestart,omitempty"`
	// Error is the one-line reason when the sandbox could not be built.
	Error string `json:"error,omitempty"`
}

// SetupError reports that the sandbox could not be built. Step names the
// failing stage ("userns", "mount /workspace", ...) so the one-line message
// tells the user what is missing.
type SetupError struct {
	Step string
	Err  error
}

func (e *SetupError) Error() string {
	return fmt.Sprintf("sandbox setup failed at %s: %v", e.Step, e.Err)
}

func (e *SetupError) Unwrap() error { return e.Err }

// ErrUnsupported is returned on operating systems without a sandbox backend.
var ErrUnsupported = errors.New("agentrun: sandboxing is not supported on this operating system")

// awaitStartAfter waits for Options.StartAfter (nil: nothing to wait for).
func awaitStartAfter(ctx context.Context, c <-chan struct{}) error {
	if c == nil {
		return nil
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
