package seccomp

import (
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Errors a caller may branch on.
var (
	// ErrUnsupported is returned by Compile, Load and NewNotifier where
	// seccomp filters cannot be built or loaded (not Linux, or Compile
	// without cgo).
	ErrUnsupported = errors.New("seccomp: not supported on this platform")
	// ErrNoNewPrivs means the kernel refused the filter because the thread
	// has neither no_new_privs nor CAP_SYS_ADMIN. Call SetNoNewPrivs first.
	ErrNoNewPrivs = errors.New("seccomp: filter refused: no_new_privs is not set on this thread")
	// ErrListenerBusy means a listener was requested but a filter already
	// in force has one (agentrun inside another notifying sandbox); the kernel
	// allows one per filter chain. Load a program compiled without
	// NotifyOnDeny instead.
	ErrListenerBusy = errors.New("seccomp: a filter with a notification listener is already in force")
	// ErrInvalidProgram means the bytes are not a loadable BPF program.
	ErrInvalidProgram = errors.New("seccomp: invalid BPF program")
)

// ProfileError reports a profile that does not parse or uses a name this
// package does not know. It is never silently repaired: a profile that says
// something unexpected is refused.
type ProfileError struct {
	// Field locates the problem, e.g. "syscalls[3].action"; empty for the
	// document as a whole.
	Field string
	// Msg says what is wrong with it.
	Msg string
	// Err is the underlying decode error, if any.
	Err error
}

func (e *ProfileError) Error() string {
	msg := e.Msg
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Field == "" {
		return "seccomp: invalid profile: " + msg
	}
	return "seccomp: invalid profile: " + e.Field + ": " + msg
}

func (e *ProfileError) Unwrap() error { return e.Err }

func profileErr(field, format string, args ...any) *ProfileError {
	return &ProfileError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// maxErrno is the largest value the kernel passes back as an errno.
const maxErrno = 4095

func knownAction(a specs.LinuxSeccompAction) bool {
	switch a {
	case specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap,
		specs.ActErrno, specs.ActTrace, specs.ActAllow, specs.ActLog, specs.ActNotify:
		return true
	}
	return false
}

func knownOp(op specs.LinuxSeccompOperator) bool {
	switch op {
	case specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
		specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual:
		return true
	}
	return false
}

func knownArch(a specs.Arch) bool {
	switch a {
	case specs.ArchX86, specs.ArchX86_64, specs.ArchX32, specs.ArchARM, specs.ArchAARCH64,
		specs.ArchMIPS, specs.ArchMIPS64, specs.ArchMIPS64N32, specs.ArchMIPSEL,
		specs.ArchMIPSEL64, specs.ArchMIPSEL64N32, specs.ArchPPC, specs.ArchPPC64,
		specs.ArchPPC64LE, specs.ArchS390, specs.ArchS390X, specs.ArchPARISC,
		specs.ArchPARISC64, specs.ArchRISCV64, specs.ArchLOONGARCH64, specs.ArchM68K,
		specs.ArchSH, specs.ArchSHEB:
		return true
	}
	return false
}

// flagTSyncName is the only seccomp flag string the OCI spec does not define
// but runtimes accept; agentrun decides on TSYNC itself (see Load).
const flagTSyncName specs.LinuxSeccompFlag = "SECCOMP_FILTER_FLAG_TSYNC"

func flagBits(f specs.LinuxSeccompFlag) (Flags, bool) {
	switch f {
	case specs.LinuxSeccompFlagLog:
		return FlagLog, true
	case specs.LinuxSeccompFlagSpecAllow:
		return FlagSpecAllow, true
	case specs.LinuxSeccompFlagWaitKillableRecv:
		return FlagWaitKillableRecv, true
	case flagTSyncName:
		return FlagTSync, true
	}
	return 0, false
}

// Validate checks a profile for everything that can be checked without
// libseccomp: known actions, operators, architectures and flags, argument
// indexes, errno ranges, non-empty name lists. Syscall names are not checked
// here: whether a name exists depends on the architecture and on the
// libseccomp version, and Compile reports the ones it skips.
func Validate(p *specs.LinuxSeccomp) error {
	if p == nil {
		return profileErr("", "no profile")
	}
	if p.DefaultAction == "" {
		return profileErr("defaultAction", "missing")
	}
	if err := checkAction("defaultAction", "defaultErrnoRet", p.DefaultAction, p.DefaultErrnoRet); err != nil {
		return err
	}
	for i, a := range p.Architectures {
		if !knownArch(a) {
			return profileErr(fmt.Sprintf("architectures[%d]", i), "unknown architecture %q", a)
		}
	}
	for i, f := range p.Flags {
		if _, ok := flagBits(f); !ok {
			return profileErr(fmt.Sprintf("flags[%d]", i), "unknown flag %q", f)
		}
	}
	for i, sc := range p.Syscalls {
		field := fmt.Sprintf("syscalls[%d]", i)
		if len(sc.Names) == 0 {
			return profileErr(field+".names", "empty")
		}
		for j, n := range sc.Names {
			if n == "" {
				return profileErr(fmt.Sprintf("%s.names[%d]", field, j), "empty syscall name")
			}
		}
		if sc.Action == "" {
			return profileErr(field+".action", "missing")
		}
		if err := checkAction(field+".action", field+".errnoRet", sc.Action, sc.ErrnoRet); err != nil {
			return err
		}
		for j, a := range sc.Args {
			af := fmt.Sprintf("%s.args[%d]", field, j)
			if a.Index > 5 {
				return profileErr(af+".index", "%d is out of range (syscalls have 6 arguments, 0-5)", a.Index)
			}
			if !knownOp(a.Op) {
				return profileErr(af+".op", "unknown operator %q", a.Op)
			}
		}
	}
	return nil
}

func checkAction(actionField, errnoField string, a specs.LinuxSeccompAction, errnoRet *uint) error {
	if !knownAction(a) {
		return profileErr(actionField, "unknown action %q", a)
	}
	if errnoRet == nil {
		return nil
	}
	if a != specs.ActErrno && a != specs.ActTrace {
		return profileErr(errnoField, "set, but action %s takes no return value", a)
	}
	if *errnoRet > maxErrno {
		return profileErr(errnoField, "%d is out of range (0-%d)", *errnoRet, maxErrno)
	}
	return nil
}
