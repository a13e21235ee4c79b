package darwin

import (
	"errors"
	"regexp"
	"strings"
)

// ErrNested is the reason a run inside another Seatbelt sandbox fails:
// macOS refuses to apply a second profile (sandbox_apply: EPERM).
var ErrNested = errors.New("agentrun is already running inside a Seatbelt sandbox and macOS cannot nest them " +
	"(sandbox_apply: Operation not permitted); run it outside the other sandbox, or turn that tool's sandbox off")

// SetupFailure is a sandbox that could not be built; Step names the stage.
// The root package turns it into an agentrun.SetupError.
type SetupFailure struct {
	Step string
	Err  error
}

func (f *SetupFailure) Error() string { return f.Step + ": " + f.Err.Error() }

func (f *SetupFailure) Unwrap() error { return f.Err }

// ProcExit is how the sandbox-exec process ended.
type ProcExit struct {
	// Code is the exit status when Signal is 0.
	Code int
	// Signal is the number of the signal that killed the process, or 0.
	Signal int
}

// Outcome is a finished run in the terms of the spawn contract.
type Outcome struct {
	ExitCode int
	Signal   int
	TimedOut bool
}

// Verdict says whose exit status an Outcome carries.
type Verdict int

const (
	// CommandRan means the status is the command's own.
	CommandRan Verdict = iota
	// CommandNotRun means sandbox-exec could not exec the command; the
	// status is the shell's 127 (not found) or 126 (not executable).
	CommandNotRun
	// SuspectSetup means sandbox-exec printed an error and exited with one
	// of its failure statuses before anything else was written. Usually the
	// sandbox could not be built, but a command that runs sandbox-exec
	// itself can look the same, so the caller confirms with a probe run.
	SuspectSetup
)

// Classification is Classify's result.
type Classification struct {
	Outcome Outcome
	Verdict Verdict
	// Failure is the presumed setup failure when Verdict is SuspectSetup.
	Failure *SetupFailure
}

// Exit statuses sandbox-exec uses for its own failures (sysexits.h):
// usage, a profile it cannot compile, and sandbox_apply or execvp errors.
var launcherFailureCodes = map[int]bool{64: true, 65: true, 71: true}

const (
	exitTimeout  = 124
	exitNotExec  = 126
	exitNotFound = 127
	exitOSErr    = 71
)

var execvpFailure = regexp.MustCompile(`^sandbox-exec: execvp\(\) of '(.*)' failed: (.*)$`)

// Classify maps how sandbox-exec ended, whether the timeout fired, and the
// sandbox-exec lines the stderr filter held back onto the spawn contract.
func Classify(e ProcExit, timedOut bool, held []string, argv0 string) Classification {
	switch {
	case timedOut:
		return Classification{Outcome: Outcome{ExitCode: exitTimeout, Signal: e.Signal, TimedOut: true}}
	case e.Signal != 0:
		return Classification{Outcome: Outcome{ExitCode: 128 + e.Signal, Signal: e.Signal}}
	}
	out := Classification{Outcome: Outcome{ExitCode: e.Code}}
	if len(held) == 0 || !launcherFailureCodes[e.Code] {
		return out
	}
	if code, ok := execFailure(held, argv0, e.Code); ok {
		out.Outcome.ExitCode, out.Verdict = code, CommandNotRun
		return out
	}
	out.Verdict, out.Failure = SuspectSetup, FailureFromLines(held)
	return out
}

// execFailure recognises sandbox-exec's report that it could not exec our
// own argv[0], which a shell reports as 127 or 126.
func execFailure(held []string, argv0 string, code int) (int, bool) {
	if len(held) != 1 || code != exitOSErr {
		return 0, false
	}
	m := execvpFailure.FindStringSubmatch(held[0])
	if m == nil || m[1] != argv0 {
		return 0, false
	}
	if m[2] == "No such file or directory" {
		return exitNotFound, true
	}
	return exitNotExec, true
}

// FailureFromLines names the failed stage from sandbox-exec's messages.
func FailureFromLines(lines []string) *SetupFailure {
	for _, l := range lines {
		if strings.Contains(l, "sandbox_apply: Operation not permitted") {
			return &SetupFailure{Step: "seatbelt", Err: ErrNested}
		}
	}
	msgs := make([]string, 0, len(lines))
	for _, l := range lines {
		msgs = append(msgs, strings.TrimPrefix(l, launcherPrefix))
	}
	return &SetupFailure{Step: "seatbelt profile", Err: errors.New("sandbox-exec: " + strings.Join(msgs, "; "))}
}
