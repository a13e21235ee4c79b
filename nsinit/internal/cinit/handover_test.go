//go:build linux && cgo

package cinit

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// compile turns a profile into the program the release carries.
func compile(t *testing.T, p *specs.LinuxSeccomp) []byte {
	t.Helper()
	prog, err := seccomp.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return prog.Filter
}

// denying is a profile that allows everything but names, which fail with
// EPERM.
func denying(names ...string) *specs.LinuxSeccomp {
	one := uint(1)
	return &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{
		{Names: names, Action: specs.ActErrno, ErrnoRet: &one}}}
}

// TestFilterAllows: the loader's reading of a filter agrees with what the
// profile says, and says no wherever the answer hangs on a value it was
// not given. A wrong yes would let the handover run a call the filter
// forbids (a hang under a notifying profile, a failed spawn otherwise).
func TestFilterAllows(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the loader hands filters over on amd64 only, not %s", runtime.GOARCH)
	}
	def := compile(t, seccomp.DefaultProfile())
	const all = 0x3f
	cases := []struct {
		name  string
		nr    uint32
		known uint
		args  [6]uint64
		want  bool
	}{
		{"read, arguments unknown", unix.SYS_READ, 0, [6]uint64{}, true},
		{"seccomp without a listener", unix.SYS_SECCOMP, 3, [6]uint64{unix.SECCOMP_SET_MODE_FILTER, 1}, true},
		{"seccomp with a listener", unix.SYS_SECCOMP, 3, [6]uint64{unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER}, false},
		{"seccomp, flags unknown", unix.SYS_SECCOMP, 1, [6]uint64{unix.SECCOMP_SET_MODE_FILTER}, false},
		{"unshare of a user namespace", unix.SYS_UNSHARE, all, [6]uint64{unix.CLONE_NEWUSER}, false},
		{"unshare, flags unknown", unix.SYS_UNSHARE, 0, [6]uint64{}, false},
		{"personality(0)", unix.SYS_PERSONALITY, all, [6]uint64{0}, true},
		{"personality(ADDR_NO_RANDOMIZE)", unix.SYS_PERSONALITY, all, [6]uint64{0x0040000}, false},
		{"mount", unix.SYS_MOUNT, all, [6]uint64{}, false},
	}
	for _, c := range cases {
		if got := filterAllows(def, c.nr, c.known, c.args); got != c.want {
			t.Errorf("default profile, %s: allows = %v, want %v", c.name, got, c.want)
		}
	}
}

// insn is one classic BPF instruction, as struct sock_filter.
type insn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// program lays instructions out as the kernel reads them.
func program(is ...insn) []byte {
	b := make([]byte, 0, 8*len(is))
	for _, i := range is {
		b = binary.NativeEndian.AppendUint16(b, i.code)
		b = append(b, i.jt, i.jf)
		b = binary.NativeEndian.AppendUint32(b, i.k)
	}
	return b
}

// TestFilterAllowsRefusesWhatItCannotRead: programs the kernel would load
// but that the loader's reading does not follow (the X register, scratch
// memory, returning A, the instruction pointer, a jump past the end,
// ALLOW with data) get no; the loads of argument words it does follow
// read the right half.
func TestFilterAllowsRefusesWhatItCannotRead(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the loader hands filters over on amd64 only, not %s", runtime.GOARCH)
	}
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeqK  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		retK  = unix.BPF_RET | unix.BPF_K
		allow = unix.SECCOMP_RET_ALLOW
		kill  = unix.SECCOMP_RET_KILL_PROCESS
		arg0  = 16 // offsetof(struct seccomp_data, args[0])
	)
	read := uint32(unix.SYS_READ)
	cases := []struct {
		name string
		prog []byte
		args [6]uint64
		want bool
	}{
		{"control: allow", program(insn{retK, 0, 0, allow}), [6]uint64{}, true},
		{"control: by number", program(insn{ldAbs, 0, 0, 0}, insn{jeqK, 0, 1, read}, insn{retK, 0, 0, allow}, insn{retK, 0, 0, kill}), [6]uint64{}, true},
		{"allow with data", program(insn{retK, 0, 0, allow | 1}), [6]uint64{}, false},
		{"log", program(insn{retK, 0, 0, unix.SECCOMP_RET_LOG}), [6]uint64{}, false},
		{"return A", program(insn{ldAbs, 0, 0, 0}, insn{unix.BPF_RET | unix.BPF_A, 0, 0, 0}), [6]uint64{}, false},
		{"X register", program(insn{ldAbs, 0, 0, 0}, insn{unix.BPF_MISC | unix.BPF_TAX, 0, 0, 0}, insn{retK, 0, 0, allow}), [6]uint64{}, false},
		{"load into X", program(insn{unix.BPF_LDX | unix.BPF_W | unix.BPF_IMM, 0, 0, 1}, insn{retK, 0, 0, allow}), [6]uint64{}, false},
		{"scratch memory", program(insn{unix.BPF_ST, 0, 0, 0}, insn{retK, 0, 0, allow}), [6]uint64{}, false},
		{"immediate load", program(insn{unix.BPF_LD | unix.BPF_IMM, 0, 0, 1}, insn{retK, 0, 0, allow}), [6]uint64{}, false},
		{"instruction pointer", program(insn{ldAbs, 0, 0, 8}, insn{retK, 0, 0, allow}), [6]uint64{}, false},
		{"jump past the end", program(insn{unix.BPF_JMP | unix.BPF_JA, 0, 0, 5}, insn{retK, 0, 0, allow}), [6]uint64{}, false},
		{"conditional jump past the end", program(insn{ldAbs, 0, 0, 0}, insn{jeqK, 7, 7, read}, insn{retK, 0, 0, allow}), [6]uint64{}, false},
		{"falls off the end", program(insn{ldAbs, 0, 0, 0}), [6]uint64{}, false},
		{"low word of an argument", program(insn{ldAbs, 0, 0, arg0}, insn{jeqK, 0, 1, 7}, insn{retK, 0, 0, allow}, insn{retK, 0, 0, kill}),
			[6]uint64{7 | 1<<32}, true},
		{"high word of an argument", program(insn{ldAbs, 0, 0, arg0 + 4}, insn{jeqK, 0, 1, 1}, insn{retK, 0, 0, allow}, insn{retK, 0, 0, kill}),
			[6]uint64{7 | 1<<32}, true},
		{"high word, other value", program(insn{ldAbs, 0, 0, arg0 + 4}, insn{jeqK, 0, 1, 1}, insn{retK, 0, 0, allow}, insn{retK, 0, 0, kill}),
			[6]uint64{7}, false},
		{"an unknown argument", program(insn{ldAbs, 0, 0, arg0 + 8}, insn{retK, 0, 0, allow}), [6]uint64{}, false},
	}
	for _, c := range cases {
		// Only args[0] is known.
		if got := filterAllows(c.prog, read, 1, c.args); got != c.want {
			t.Errorf("%s: allows = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestHandoverAllowed: the default profile, with and without violation
// reports, lets the loader hand its filter over; a profile that denies any
// system call of the handover, or decides one by an argument the handover
// cannot know, has init load the filter itself.
func TestHandoverAllowed(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the loader hands filters over on amd64 only, not %s", runtime.GOARCH)
	}
	tsync := uint(unix.SECCOMP_FILTER_FLAG_TSYNC)
	if !handoverAllowed(compile(t, seccomp.DefaultProfile()), tsync) {
		t.Error("the default profile does not allow the handover: every spawn would load its filter on the critical path")
	}
	notify, err := seccomp.NotifyOnDeny(seccomp.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	if !handoverAllowed(compile(t, notify), tsync) {
		t.Error("the default profile with violation reports does not allow the handover")
	}
	for _, name := range []string{"futex", "seccomp", "exit", "exit_group", "getpid", "tgkill", "sched_yield"} {
		if handoverAllowed(compile(t, denying(name)), tsync) {
			t.Errorf("a profile denying %s allows the handover", name)
		}
	}
	// futex allowed only at one address: the handover's addresses are
	// not known in advance.
	one := uint(1)
	byAddr := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &one, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"seccomp", "exit", "exit_group", "getpid", "tgkill", "sched_yield"}, Action: specs.ActAllow},
		{Names: []string{"futex"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 4096, Op: specs.OpEqualTo}}},
	}}
	if handoverAllowed(compile(t, byAddr), tsync) {
		t.Error("a profile that allows futex at one address only allows the handover")
	}
	// Control: the same profile with futex allowed outright does.
	byAddr.Syscalls[1].Args = nil
	if !handoverAllowed(compile(t, byAddr), tsync) {
		t.Error("a profile allowing exactly the handover's calls does not allow it")
	}
}
