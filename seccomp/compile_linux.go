//go:build linux && cgo

package seccomp

import (
	"fmt"
	"io"
	"os"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

func compileHashed(p *specs.LinuxSeccomp, h Hash) (*Program, error) {
	prog, _, err := compileWith(p, h, true)
	return prog, err
}

// compileWith compiles with libseccomp and, if tryCompact, replaces its
// program with compact's where that means the same.
// It also returns what compact was given (for tests).
func compileWith(p *specs.LinuxSeccomp, h Hash, tryCompact bool) (*Program, *compactInput, error) {
	if err := Validate(p); err != nil {
		return nil, nil, err
	}
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp: compile: native architecture: %w", err)
	}
	defAction := toAction(p.DefaultAction, p.DefaultErrnoRet)
	filter, err := libseccomp.NewFilter(defAction)
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp: compile: new filter (default %s): %w", p.DefaultAction, err)
	}
	defer filter.Release()

	// A syscall from an architecture the program does not cover must not
	// run. Killing the process makes the attempt visible (SIGSYS) rather
	// than leaving a 32-bit program spinning on failed calls.
	in := compactInput{defRet: retFor(p.DefaultAction, p.DefaultErrnoRet), badArcRet: retKillProcess}
	if err := filter.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		if err := filter.SetBadArchAction(libseccomp.ActKillThread); err != nil {
			return nil, nil, fmt.Errorf("seccomp: compile: bad-arch action: %w", err)
		}
		in.badArcRet = retKillThread
	}
	// A binary tree keeps long allowlists at O(log n) per call; libseccomp
	// before 2.5 lacks it and falls back to the linear layout.
	_ = filter.SetOptimize(2)

	arches := []libseccomp.ScmpArch{native}
	for i, a := range p.Architectures {
		sa, err := libseccomp.GetArchFromString(strings.ToLower(strings.TrimPrefix(string(a), "SCMP_ARCH_")))
		if err != nil {
			return nil, nil, &ProfileError{Field: fmt.Sprintf("architectures[%d]", i), Msg: "not supported by libseccomp", Err: err}
		}
		if sa == native || !runnable(native, sa) || containsArch(arches, sa) {
			continue
		}
		if err := filter.AddArch(sa); err != nil {
			return nil, nil, fmt.Errorf("seccomp: compile: add architecture %s: %w", a, err)
		}
		arches = append(arches, sa)
	}

	prog := &Program{Hash: h, names: map[uint64]string{}}
	notify := p.DefaultAction == specs.ActNotify
	skipped := map[string]bool{}
	for i, sc := range p.Syscalls {
		action := toAction(sc.Action, sc.ErrnoRet)
		if action == defAction {
			continue // libseccomp refuses rules that repeat the default
		}
		for _, name := range sc.Names {
			call, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				if !skipped[name] {
					skipped[name] = true
					prog.Skipped = append(prog.Skipped, name)
				}
				continue
			}
			if err := addRule(filter, call, action, sc.Args); err != nil {
				return nil, nil, fmt.Errorf("seccomp: compile: syscalls[%d] %s (%s): %w", i, name, sc.Action, err)
			}
			if call >= 0 { // a negative pseudo-number: not a syscall here
				for _, args := range splitArgs(sc.Args) {
					in.rules = append(in.rules, cRule{nr: uint32(call), ret: retFor(sc.Action, sc.ErrnoRet), args: args})
				}
			}
			if sc.Action == specs.ActNotify {
				notify = true
				recordNames(prog.names, arches, name)
			}
		}
	}
	if p.DefaultAction == specs.ActNotify {
		recordAllNames(prog.names, arches)
	}

	prog.Filter, err = exportBPF(filter)
	if err != nil {
		return nil, nil, err
	}
	// The smaller program where it means the same (compact.go); a profile
	// it declines, or one it would get wrong, keeps libseccomp's.
	if audit, ok := auditArch(native); tryCompact && ok && len(arches) == 1 && (native == libseccomp.ArchAMD64 || native == libseccomp.ArchARM64) {
		in.arch = audit
		if c, ok, err := compact(&in); err == nil && ok && sameDecisions(c, prog.Filter, &in) == nil {
			prog.Filter = c
			prog.compact = true
		}
	}
	for _, f := range p.Flags {
		bits, _ := flagBits(f) // Validate has vetted the names
		prog.Flags |= bits
	}
	if notify {
		prog.Flags |= FlagNewListener
	} else if prog.Flags&FlagWaitKillableRecv != 0 {
		// The kernel would refuse the flag at Load, in the child; say so here.
		return nil, nil, profileErr("flags", "%s needs SCMP_ACT_NOTIFY rules", specs.LinuxSeccompFlagWaitKillableRecv)
	}
	return prog, &in, nil
}

func toAction(a specs.LinuxSeccompAction, errnoRet *uint) libseccomp.ScmpAction {
	ret := int16(errnoEPERM)
	if errnoRet != nil {
		ret = int16(*errnoRet) // Validate bounds it to 4095
	}
	switch a {
	case specs.ActKill, specs.ActKillThread:
		return libseccomp.ActKillThread
	case specs.ActKillProcess:
		return libseccomp.ActKillProcess
	case specs.ActTrap:
		return libseccomp.ActTrap
	case specs.ActErrno:
		return libseccomp.ActErrno.SetReturnCode(ret)
	case specs.ActTrace:
		return libseccomp.ActTrace.SetReturnCode(ret)
	case specs.ActLog:
		return libseccomp.ActLog
	case specs.ActNotify:
		return libseccomp.ActNotify
	}
	return libseccomp.ActAllow
}

func toOp(op specs.LinuxSeccompOperator) libseccomp.ScmpCompareOp {
	switch op {
	case specs.OpNotEqual:
		return libseccomp.CompareNotEqual
	case specs.OpLessThan:
		return libseccomp.CompareLess
	case specs.OpLessEqual:
		return libseccomp.CompareLessOrEqual
	case specs.OpGreaterEqual:
		return libseccomp.CompareGreaterEqual
	case specs.OpGreaterThan:
		return libseccomp.CompareGreater
	case specs.OpMaskedEqual:
		return libseccomp.CompareMaskedEqual
	}
	return libseccomp.CompareEqual
}

// addRule follows the OCI runtimes' reading of args: comparisons on
// different arguments must all hold (one rule); several comparisons on the
// same argument are alternatives (one rule each), because libseccomp cannot
// test one argument twice in a rule.
func addRule(f *libseccomp.ScmpFilter, call libseccomp.ScmpSyscall, action libseccomp.ScmpAction, args []specs.LinuxSeccompArg) error {
	if len(args) == 0 {
		return f.AddRule(call, action)
	}
	conds := make([]libseccomp.ScmpCondition, 0, len(args))
	seen := map[uint]bool{}
	repeated := false
	for _, a := range args {
		var c libseccomp.ScmpCondition
		var err error
		if a.Op == specs.OpMaskedEqual {
			c, err = libseccomp.MakeCondition(a.Index, libseccomp.CompareMaskedEqual, a.Value, a.ValueTwo)
		} else {
			c, err = libseccomp.MakeCondition(a.Index, toOp(a.Op), a.Value)
		}
		if err != nil {
			return fmt.Errorf("argument %d %s: %w", a.Index, a.Op, err)
		}
		repeated = repeated || seen[a.Index]
		seen[a.Index] = true
		conds = append(conds, c)
	}
	if !repeated {
		return f.AddRuleConditional(call, action, conds)
	}
	for _, c := range conds {
		if err := f.AddRuleConditional(call, action, []libseccomp.ScmpCondition{c}); err != nil {
			return err
		}
	}
	return nil
}

// runnable reports whether a kernel of the native architecture can run
// tasks of architecture a (its compat ABIs).
func runnable(native, a libseccomp.ScmpArch) bool {
	switch native {
	case libseccomp.ArchAMD64:
		return a == libseccomp.ArchX86 || a == libseccomp.ArchX32
	case libseccomp.ArchARM64:
		return a == libseccomp.ArchARM
	case libseccomp.ArchS390X:
		return a == libseccomp.ArchS390
	case libseccomp.ArchPPC64:
		return a == libseccomp.ArchPPC
	case libseccomp.ArchMIPS64:
		return a == libseccomp.ArchMIPS || a == libseccomp.ArchMIPS64N32
	case libseccomp.ArchMIPSEL64:
		return a == libseccomp.ArchMIPSEL || a == libseccomp.ArchMIPSEL64N32
	}
	return false
}

func containsArch(list []libseccomp.ScmpArch, a libseccomp.ScmpArch) bool {
	for _, v := range list {
		if v == a {
			return true
		}
	}
	return false
}

// auditArch is the AUDIT_ARCH_* value the kernel puts in seccomp_data.arch.
func auditArch(a libseccomp.ScmpArch) (uint32, bool) {
	switch a {
	case libseccomp.ArchAMD64, libseccomp.ArchX32: // x32 numbers carry bit 30
		return auditArchX86_64, true
	case libseccomp.ArchX86:
		return 0x40000003, true
	case libseccomp.ArchARM64:
		return 0xc00000b7, true
	case libseccomp.ArchARM:
		return 0x40000028, true
	}
	return 0, false
}

func recordNames(names map[uint64]string, arches []libseccomp.ScmpArch, name string) {
	for _, a := range arches {
		audit, ok := auditArch(a)
		if !ok {
			continue
		}
		call, err := libseccomp.GetSyscallFromNameByArch(name, a)
		if err != nil || call < 0 {
			continue
		}
		names[nameKey(audit, int32(call))] = name
	}
}

// recordAllNames covers a notifying default action, which can report any
// syscall.
func recordAllNames(names map[uint64]string, arches []libseccomp.ScmpArch) {
	for _, a := range arches {
		audit, ok := auditArch(a)
		if !ok {
			continue
		}
		base := 0
		if a == libseccomp.ArchX32 {
			base = 0x40000000
		}
		for nr := base; nr < base+1024; nr++ {
			if n, err := libseccomp.ScmpSyscall(nr).GetNameByArch(a); err == nil && n != "" {
				names[nameKey(audit, int32(nr))] = n
			}
		}
	}
}

// exportBPF writes the program to a memfd and reads it back: libseccomp
// before 2.6 can only export to a file descriptor.
func exportBPF(f *libseccomp.ScmpFilter) ([]byte, error) {
	fd, err := unix.MemfdCreate("agentrun-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("seccomp: compile: memfd_create: %w", err)
	}
	file := os.NewFile(uintptr(fd), "agentrun-seccomp")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("seccomp: compile: export BPF: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("seccomp: compile: rewind exported BPF: %w", err)
	}
	b, err := io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("seccomp: compile: read exported BPF: %w", err)
	}
	if len(b) == 0 || len(b)%sockFilterSize != 0 {
		return nil, fmt.Errorf("seccomp: compile: libseccomp exported %d bytes, not a whole number of instructions", len(b))
	}
	if len(b)/sockFilterSize > maxInstructions {
		return nil, fmt.Errorf("seccomp: compile: program has %d instructions, the kernel takes at most %d", len(b)/sockFilterSize, maxInstructions)
	}
	return b, nil
}

// compilerID names what a compiled program depends on besides the profile:
// the libseccomp version and the native architecture.
func compilerID() string {
	maj, min, micro := libseccomp.GetLibraryVersion()
	arch, _ := libseccomp.GetNativeArch()
	return fmt.Sprintf("libseccomp%d.%d.%d-%s-%s", maj, min, micro, arch, compactVersion)
}
