package seccomp

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// NotifyOnDeny returns a copy of p in which every action that would fail a
// call with EPERM (SCMP_ACT_ERRNO with errnoRet 1 or unset) becomes
// SCMP_ACT_NOTIFY, so that a Notifier in the parent sees each denied call,
// records it and answers EPERM. While the Notifier runs, the sandboxed
// command observes exactly what it would under p. Other denials (ENOSYS for
// unknown syscalls, kills) are unchanged and not reported.
//
// Why user notification: it works rootless (it needs no_new_privs, nothing
// else), it names the call and its arguments as the kernel saw them, and the
// answer comes from the parent, which the sandbox cannot influence. Audit
// logs (SCMP_ACT_LOG) need root to read and do not deny; ptrace-based
// reporting would cost every process a tracer.
//
// If the listener is gone (the parent closed it or died), the kernel fails a
// notifying call with ENOSYS instead, so a denied call stays denied; only its
// errno and its report change.
//
// One precaution makes that hold against a hostile command: between filters
// of equal precedence the kernel uses the newest one, so a command that
// installed its own filter with a listener of its own could receive the
// notifications meant for agentrun and answer "continue". The kernel refuses
// a second listener in a filter chain only while the first listener is
// open. NotifyOnDeny therefore makes sure seccomp(2) with
// SECCOMP_FILTER_FLAG_NEW_LISTENER is denied; DefaultProfile already does.
// A profile that puts argument conditions on seccomp itself cannot be
// adjusted safely and is refused.
func NotifyOnDeny(p *specs.LinuxSeccomp) (*specs.LinuxSeccomp, error) {
	if err := Validate(p); err != nil {
		return nil, err
	}
	out := cloneProfile(p)
	if isEPERM(out.DefaultAction, out.DefaultErrnoRet) {
		out.DefaultAction, out.DefaultErrnoRet = specs.ActNotify, nil
	}
	for i := range out.Syscalls {
		sc := &out.Syscalls[i]
		if isEPERM(sc.Action, sc.ErrnoRet) {
			sc.Action, sc.ErrnoRet = specs.ActNotify, nil
		}
	}
	if err := guardNestedListener(out); err != nil {
		return nil, err
	}
	return out, nil
}

func isEPERM(a specs.LinuxSeccompAction, errnoRet *uint) bool {
	return a == specs.ActErrno && (errnoRet == nil || *errnoRet == errnoEPERM)
}

// permits reports whether an action lets a call run (or hands it to a
// tracer, which may let it run).
func permits(a specs.LinuxSeccompAction) bool {
	return a == specs.ActAllow || a == specs.ActLog || a == specs.ActTrace
}

// guardNestedListener makes seccomp(2) fail (reported, like the other
// denials) when it asks for a new listener, without changing what it does
// otherwise.
func guardNestedListener(p *specs.LinuxSeccomp) error {
	denyListener := specs.LinuxSyscall{Names: []string{"seccomp"}, Action: specs.ActNotify,
		Args: []specs.LinuxSeccompArg{maskedEq(1, filterNewListener, filterNewListener)}}

	var unconditional []int // entries naming seccomp without conditions
	for i, sc := range p.Syscalls {
		if !contains(sc.Names, "seccomp") {
			continue
		}
		switch {
		case len(sc.Args) == 0:
			unconditional = append(unconditional, i)
		case !isGuard(sc):
			// Another conditional rule could overlap the guard with a
			// different action, and libseccomp's order would decide.
			return profileErr(fmt.Sprintf("syscalls[%d]", i), "argument rules on seccomp cannot be combined with violation reports; allow or deny seccomp without conditions")
		}
	}
	if len(unconditional) == 0 {
		// Only the default action, or the guard itself, applies.
		if permits(p.DefaultAction) && !hasGuard(p) {
			p.Syscalls = append(p.Syscalls, denyListener)
		}
		return nil
	}
	// Split the permission: the same action while no listener is requested,
	// a reported denial when one is; the two are disjoint. Every
	// unconditional permission is removed, since libseccomp would let one
	// override the conditional pair.
	var allowed *specs.LinuxSyscall
	for _, i := range unconditional {
		sc := p.Syscalls[i]
		if !permits(sc.Action) {
			continue // an unconditional denial overrides the pair anyway
		}
		p.Syscalls[i].Names = without(sc.Names, "seccomp")
		if allowed == nil {
			allowed = &specs.LinuxSyscall{Names: []string{"seccomp"}, Action: sc.Action, ErrnoRet: cloneUint(sc.ErrnoRet),
				Args: []specs.LinuxSeccompArg{maskedEq(1, filterNewListener, 0)}}
		}
	}
	if allowed != nil {
		p.Syscalls = append(p.Syscalls, *allowed, denyListener)
	}
	// Entries left without names by the split are dropped.
	kept := p.Syscalls[:0]
	for _, sc := range p.Syscalls {
		if len(sc.Names) > 0 {
			kept = append(kept, sc)
		}
	}
	p.Syscalls = kept
	return nil
}

func hasGuard(p *specs.LinuxSeccomp) bool {
	for _, sc := range p.Syscalls {
		if contains(sc.Names, "seccomp") && isGuard(sc) && !permits(sc.Action) {
			return true
		}
	}
	return false
}

// isGuard recognises the two halves of the listener guard.
func isGuard(sc specs.LinuxSyscall) bool {
	if len(sc.Args) != 1 {
		return false
	}
	a := sc.Args[0]
	return a.Index == 1 && a.Op == specs.OpMaskedEqual && a.Value == filterNewListener &&
		(a.ValueTwo == 0 || a.ValueTwo == filterNewListener)
}

func without(names []string, drop string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n != drop {
			out = append(out, n)
		}
	}
	return out
}

func cloneProfile(p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := *p
	out.DefaultErrnoRet = cloneUint(p.DefaultErrnoRet)
	out.Architectures = append([]specs.Arch(nil), p.Architectures...)
	out.Flags = append([]specs.LinuxSeccompFlag(nil), p.Flags...)
	out.Syscalls = make([]specs.LinuxSyscall, len(p.Syscalls))
	for i, sc := range p.Syscalls {
		out.Syscalls[i] = specs.LinuxSyscall{
			Names:    append([]string(nil), sc.Names...),
			Action:   sc.Action,
			ErrnoRet: cloneUint(sc.ErrnoRet),
			Args:     append([]specs.LinuxSeccompArg(nil), sc.Args...),
		}
	}
	return &out
}

func cloneUint(v *uint) *uint {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}
