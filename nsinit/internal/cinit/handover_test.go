//go:build linux && cgo

package cinit

import (
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
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("the loader hands filters over on amd64 and arm64 only, not %s", runtime.GOARCH)
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

// TestHandoverAllowed: the default profile, with and without violation
// reports, lets the loader hand its filter over; a profile that denies any
// system call of the handover, or decides one by an argument the handover
// cannot know, has init load the filter itself.
func TestHandoverAllowed(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("the loader hands filters over on amd64 and arm64 only, not %s", runtime.GOARCH)
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
	for _, name := range []string{"futex", "seccomp", "exit", "getpid", "tgkill", "sched_yield"} {
		if handoverAllowed(compile(t, denying(name)), tsync) {
			t.Errorf("a profile denying %s allows the handover", name)
		}
	}
	// futex allowed only at one address: the handover's addresses are
	// not known in advance.
	one := uint(1)
	byAddr := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &one, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"seccomp", "exit", "getpid", "tgkill", "sched_yield"}, Action: specs.ActAllow},
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
