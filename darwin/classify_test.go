package darwin

import (
	"errors"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	nested := []string{"sandbox-exec: sandbox_apply: Operation not permitted"}
	for _, c := range []struct {
		name     string
		exit     ProcExit
		timedOut bool
		held     []string
		want     Outcome
		verdict  Verdict
	}{
		{name: "success", exit: ProcExit{Code: 0}, want: Outcome{ExitCode: 0}},
		{name: "own status", exit: ProcExit{Code: 3}, want: Outcome{ExitCode: 3}},
		{name: "signal", exit: ProcExit{Signal: 15}, want: Outcome{ExitCode: 143, Signal: 15}},
		{name: "timeout", exit: ProcExit{Signal: 9}, timedOut: true, want: Outcome{ExitCode: 124, Signal: 9, TimedOut: true}},
		{name: "timeout after exit", exit: ProcExit{Code: 0}, timedOut: true, want: Outcome{ExitCode: 124, TimedOut: true}},
		{name: "nested", exit: ProcExit{Code: 71}, held: nested, want: Outcome{ExitCode: 71}, verdict: SuspectSetup},
		{name: "profile error", exit: ProcExit{Code: 65}, held: []string{"sandbox-exec: unbound variable: foo"}, want: Outcome{ExitCode: 65}, verdict: SuspectSetup},
		{name: "launcher text but ordinary status", exit: ProcExit{Code: 1}, held: nested, want: Outcome{ExitCode: 1}},
		{name: "launcher text but killed", exit: ProcExit{Signal: 2}, held: nested, want: Outcome{ExitCode: 130, Signal: 2}},
		{name: "not found", exit: ProcExit{Code: 71}, held: []string{"sandbox-exec: execvp() of 'nope' failed: No such file or directory"}, want: Outcome{ExitCode: 127}, verdict: CommandNotRun},
		{name: "not executable", exit: ProcExit{Code: 71}, held: []string{"sandbox-exec: execvp() of 'nope' failed: Permission denied"}, want: Outcome{ExitCode: 126}, verdict: CommandNotRun},
		{name: "exec denied by profile", exit: ProcExit{Code: 71}, held: []string{"sandbox-exec: execvp() of 'nope' failed: Operation not permitted"}, want: Outcome{ExitCode: 126}, verdict: CommandNotRun},
		{name: "execvp of another program", exit: ProcExit{Code: 71}, held: []string{"sandbox-exec: execvp() of 'other' failed: No such file or directory"}, want: Outcome{ExitCode: 71}, verdict: SuspectSetup},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Classify(c.exit, c.timedOut, c.held, "nope")
			if got.Outcome != c.want || got.Verdict != c.verdict {
				t.Errorf("Classify = %+v verdict %d, want %+v verdict %d", got.Outcome, got.Verdict, c.want, c.verdict)
			}
			if (got.Verdict == SuspectSetup) != (got.Failure != nil) {
				t.Errorf("Failure = %v with verdict %d", got.Failure, got.Verdict)
			}
		})
	}
}

func TestFailureFromLines(t *testing.T) {
	f := FailureFromLines([]string{"sandbox-exec: sandbox_apply: Operation not permitted"})
	if !errors.Is(f, ErrNested) || f.Step != "seatbelt" {
		t.Errorf("nested failure = %v", f)
	}
	f = FailureFromLines([]string{"sandbox-exec: data object length 84244 exceeds maximum (65535)"})
	if f.Step != "seatbelt profile" || !strings.Contains(f.Error(), "exceeds maximum") {
		t.Errorf("profile failure = %v", f)
	}
}
