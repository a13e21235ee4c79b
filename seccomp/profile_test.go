package seccomp

import (
	"encoding/json"
	"math/rand"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestComplement32(t *testing.T) {
	sets := [][]uint32{
		{0},
		{0xffffffff},
		{ioctlTIOCSTI, ioctlTIOCLINUX},
		{perLinux, perLinux32, perUname26, perUname26 | perLinux32, personalityQuery},
		{afUnix, afInet, afInet6, afNetlink},
		{5, 5, 7}, // duplicates
	}
	rng := rand.New(rand.NewSource(1))
	for _, excluded := range sets {
		pairs := complement32(excluded)
		if len(pairs) > 32*len(excluded) {
			t.Errorf("%v: %d pairs, want at most %d", excluded, len(pairs), 32*len(excluded))
		}
		isExcluded := map[uint32]bool{}
		var samples []uint32
		for _, e := range excluded {
			isExcluded[e] = true
			// every value one bit away, and the neighbours
			for b := 0; b < 32; b++ {
				samples = append(samples, e^(1<<b))
			}
			samples = append(samples, e, e-1, e+1)
		}
		for i := 0; i < 20000; i++ {
			samples = append(samples, rng.Uint32())
		}
		samples = append(samples, 0, 0xffffffff, 0x80000000, 0x7fffffff)
		for _, x := range samples {
			matches := 0
			for _, p := range pairs {
				if x&p.mask == p.value {
					matches++
				}
			}
			want := 1
			if isExcluded[x] {
				want = 0
			}
			if matches != want {
				t.Fatalf("excluded %v: %#x matches %d pairs, want %d", excluded, x, matches, want)
			}
		}
	}
}

// evalRule reports whether a profile entry matches a call, with the OCI
// runtimes' reading of args (see addRule).
func evalRule(sc specs.LinuxSyscall, args [6]uint64) bool {
	if len(sc.Args) == 0 {
		return true
	}
	seen := map[uint]bool{}
	repeated := false
	for _, a := range sc.Args {
		repeated = repeated || seen[a.Index]
		seen[a.Index] = true
	}
	any, all := false, true
	for _, a := range sc.Args {
		v := args[a.Index]
		var ok bool
		switch a.Op {
		case specs.OpMaskedEqual:
			ok = v&a.Value == a.ValueTwo
		case specs.OpEqualTo:
			ok = v == a.Value
		case specs.OpNotEqual:
			ok = v != a.Value
		case specs.OpLessThan:
			ok = v < a.Value
		case specs.OpLessEqual:
			ok = v <= a.Value
		case specs.OpGreaterThan:
			ok = v > a.Value
		case specs.OpGreaterEqual:
			ok = v >= a.Value
		}
		any = any || ok
		all = all && ok
	}
	if repeated {
		return any
	}
	return all
}

// evalProfile returns the actions of every entry that matches, so a test
// can insist that they agree: libseccomp's order among overlapping rules is
// unspecified, so the default profile must never rely on it.
func evalProfile(p *specs.LinuxSeccomp, name string, args [6]uint64) []string {
	var out []string
	for _, sc := range p.Syscalls {
		if !contains(sc.Names, name) || !evalRule(sc, args) {
			continue
		}
		a := string(sc.Action)
		if sc.ErrnoRet != nil {
			a += "/" + map[uint]string{1: "EPERM", 38: "ENOSYS"}[*sc.ErrnoRet]
		}
		out = append(out, a)
	}
	return out
}

func TestDefaultProfileDecisions(t *testing.T) {
	p := DefaultProfile()
	if err := Validate(p); err != nil {
		t.Fatal(err)
	}
	const (
		allow = "SCMP_ACT_ALLOW"
		eperm = "SCMP_ACT_ERRNO/EPERM"
		none  = "" // default action: ENOSYS
	)
	hi := uint64(0xffffffff00000000) // garbage in the upper half of a 32-bit argument
	cases := []struct {
		name string
		args [6]uint64
		want string
	}{
		{"read", [6]uint64{}, allow},
		{"keyctl", [6]uint64{}, eperm},
		{"mount", [6]uint64{}, eperm},
		{"nosuchcall", [6]uint64{}, none},
		{"clone", [6]uint64{0x11 /* SIGCHLD */ | 0x01000000 | 0x00200000}, allow},
		{"clone", [6]uint64{cloneNewUser | 0x11}, eperm},
		{"clone", [6]uint64{cloneNewNet | cloneNewNS}, eperm},
		{"clone", [6]uint64{cloneNewTime | 0x11}, allow}, // 0x80 is part of the exit signal on clone
		{"unshare", [6]uint64{0x200 /* CLONE_FS */}, allow},
		{"unshare", [6]uint64{cloneNewTime}, eperm},
		{"unshare", [6]uint64{cloneNewUser}, eperm},
		{"socket", [6]uint64{afUnix, 1, 0}, allow},
		{"socket", [6]uint64{afInet6, 2, 0}, allow},
		{"socket", [6]uint64{hi | afInet, 1, 0}, allow},
		{"socket", [6]uint64{17 /* AF_PACKET */, 3, 0}, eperm},
		{"socket", [6]uint64{hi | 17, 3, 0}, eperm},
		{"socket", [6]uint64{15 /* AF_KEY */, 3, 0}, eperm},
		{"socket", [6]uint64{40 /* AF_VSOCK */, 1, 0}, eperm},
		{"socket", [6]uint64{0x7fffffff, 1, 0}, eperm},
		{"socket", [6]uint64{afNetlink, 3, netlinkRoute}, allow},
		{"socket", [6]uint64{afNetlink, 3, hi | netlinkRoute}, allow},
		{"socket", [6]uint64{afNetlink, 3, 9 /* NETLINK_AUDIT */}, eperm},
		{"socket", [6]uint64{afNetlink, 3, hi | 9}, eperm},
		{"ioctl", [6]uint64{0, 0x5401 /* TCGETS */}, allow},
		{"ioctl", [6]uint64{0, 0x5413 /* TIOCGWINSZ */}, allow},
		{"ioctl", [6]uint64{0, 0xc0502100}, allow},
		{"ioctl", [6]uint64{0, ioctlTIOCSTI}, eperm},
		{"ioctl", [6]uint64{0, hi | ioctlTIOCSTI}, eperm},
		{"ioctl", [6]uint64{0, ioctlTIOCLINUX}, eperm},
		{"personality", [6]uint64{personalityQuery}, allow},
		{"personality", [6]uint64{hi | perLinux}, allow},
		{"personality", [6]uint64{perUname26 | perLinux32}, allow},
		{"personality", [6]uint64{0x0400000 /* READ_IMPLIES_EXEC */}, eperm},
		{"personality", [6]uint64{0x0040000 /* ADDR_NO_RANDOMIZE */}, eperm},
		{"seccomp", [6]uint64{1, 0}, allow},
		{"seccomp", [6]uint64{1, 1 /* TSYNC */}, allow},
		{"seccomp", [6]uint64{1, filterNewListener}, eperm},
		{"seccomp", [6]uint64{1, hi | filterNewListener | 1}, eperm},
	}
	for _, c := range cases {
		got := evalProfile(p, c.name, c.args)
		for _, a := range got[min(1, len(got)):] {
			if a != got[0] {
				t.Errorf("%s%x: rules with different actions match (%v); they must not overlap", c.name, c.args[:3], got)
			}
		}
		g := none
		if len(got) > 0 {
			g = got[0]
		}
		if g != c.want {
			t.Errorf("%s%x = %q, want %q", c.name, c.args[:3], g, c.want)
		}
	}
	if got := evalProfile(p, "clone3", [6]uint64{}); len(got) != 1 || got[0] != "SCMP_ACT_ERRNO/ENOSYS" {
		t.Errorf("clone3 = %v, want ENOSYS", got)
	}
}

// libseccomp lets an unconditional rule override conditional ones for the
// same syscall, so a syscall must have one or the other.
func TestDefaultProfileNoMixedRules(t *testing.T) {
	p := DefaultProfile()
	conditional, unconditional := map[string]bool{}, map[string]bool{}
	for _, sc := range p.Syscalls {
		for _, n := range sc.Names {
			if len(sc.Args) > 0 {
				conditional[n] = true
			} else {
				if unconditional[n] {
					t.Errorf("%s is listed twice without conditions", n)
				}
				unconditional[n] = true
			}
		}
	}
	for n := range conditional {
		if unconditional[n] {
			t.Errorf("%s has both conditional and unconditional rules", n)
		}
	}
	for _, n := range []string{"clone", "unshare", "socket", "ioctl", "personality", "seccomp"} {
		if !conditional[n] {
			t.Errorf("%s should be filtered on its arguments", n)
		}
	}
}

func TestDefaultProfileFresh(t *testing.T) {
	a := DefaultProfile()
	a.Syscalls[0].Names[0] = "changed"
	*a.DefaultErrnoRet = 99
	b := DefaultProfile()
	if b.Syscalls[0].Names[0] == "changed" || *b.DefaultErrnoRet != errnoENOSYS {
		t.Fatal("DefaultProfile shares state between calls")
	}
}

func TestDefaultProfileRoundTrip(t *testing.T) {
	p := DefaultProfile()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseProfile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Fatal("default profile changed through JSON")
	}
	if ProfileHash(p) != ProfileHash(q) {
		t.Fatal("hash changed through JSON")
	}
}

func TestProfileHash(t *testing.T) {
	p := DefaultProfile()
	h := ProfileHash(p)
	if h != ProfileHash(DefaultProfile()) {
		t.Fatal("equal profiles hash differently")
	}
	variants := []func(*specs.LinuxSeccomp){
		func(p *specs.LinuxSeccomp) { p.DefaultAction = specs.ActKillProcess },
		func(p *specs.LinuxSeccomp) { p.DefaultErrnoRet = nil },
		func(p *specs.LinuxSeccomp) { p.Architectures = p.Architectures[:1] },
		func(p *specs.LinuxSeccomp) { p.Flags = append(p.Flags, specs.LinuxSeccompFlagLog) },
		func(p *specs.LinuxSeccomp) { p.Syscalls[0].Names = p.Syscalls[0].Names[1:] },
		func(p *specs.LinuxSeccomp) { p.Syscalls[len(p.Syscalls)-1].Args[0].ValueTwo ^= 1 },
		func(p *specs.LinuxSeccomp) { p.ListenerPath = "/run/x" },
		// moving a name between adjacent entries must change the hash
		func(p *specs.LinuxSeccomp) {
			p.Syscalls[1].Names = append([]string{p.Syscalls[0].Names[len(p.Syscalls[0].Names)-1]}, p.Syscalls[1].Names...)
			p.Syscalls[0].Names = p.Syscalls[0].Names[:len(p.Syscalls[0].Names)-1]
		},
	}
	for i, change := range variants {
		q := DefaultProfile()
		change(q)
		if ProfileHash(q) == h {
			t.Errorf("variant %d: hash unchanged", i)
		}
	}
}

func TestNotifyOnDenyDefault(t *testing.T) {
	p := DefaultProfile()
	n, err := NotifyOnDeny(p)
	if err != nil {
		t.Fatal(err)
	}
	if n.DefaultAction != specs.ActErrno || *n.DefaultErrnoRet != errnoENOSYS {
		t.Errorf("default action changed: %s", n.DefaultAction)
	}
	for _, sc := range n.Syscalls {
		if isEPERM(sc.Action, sc.ErrnoRet) {
			t.Errorf("%v still EPERM", sc.Names)
		}
	}
	if got := evalProfile(n, "keyctl", [6]uint64{}); len(got) != 1 || got[0] != "SCMP_ACT_NOTIFY" {
		t.Errorf("keyctl = %v", got)
	}
	if got := evalProfile(n, "clone3", [6]uint64{}); len(got) != 1 || got[0] != "SCMP_ACT_ERRNO/ENOSYS" {
		t.Errorf("clone3 = %v", got)
	}
	if got := evalProfile(n, "seccomp", [6]uint64{1, filterNewListener}); len(got) != 1 || got[0] != "SCMP_ACT_NOTIFY" {
		t.Errorf("seccomp with a listener = %v", got)
	}
	if got := evalProfile(n, "seccomp", [6]uint64{1, 0}); len(got) != 1 || got[0] != "SCMP_ACT_ALLOW" {
		t.Errorf("seccomp = %v", got)
	}
	// p is untouched
	if got := evalProfile(p, "keyctl", [6]uint64{}); got[0] != "SCMP_ACT_ERRNO/EPERM" {
		t.Errorf("NotifyOnDeny modified its input: %v", got)
	}
}

func TestNotifyOnDenyGuardsSeccomp(t *testing.T) {
	eperm := uint(1)
	// Docker-like: default EPERM, seccomp allowed without conditions.
	docker := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Syscalls: []specs.LinuxSyscall{
			{Names: []string{"read", "seccomp", "write"}, Action: specs.ActAllow},
		},
	}
	n, err := NotifyOnDeny(docker)
	if err != nil {
		t.Fatal(err)
	}
	if n.DefaultAction != specs.ActNotify {
		t.Errorf("default EPERM not converted: %s", n.DefaultAction)
	}
	for _, c := range []struct {
		flags uint64
		want  string
	}{{0, "SCMP_ACT_ALLOW"}, {filterNewListener, "SCMP_ACT_NOTIFY"}} {
		if got := evalProfile(n, "seccomp", [6]uint64{1, c.flags}); len(got) != 1 || got[0] != c.want {
			t.Errorf("seccomp flags %#x = %v, want %s", c.flags, got, c.want)
		}
	}
	if got := evalProfile(n, "read", [6]uint64{}); len(got) != 1 {
		t.Errorf("read = %v", got)
	}

	// Denylist: default allow, seccomp unmentioned.
	deny := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Syscalls:      []specs.LinuxSyscall{{Names: []string{"keyctl"}, Action: specs.ActErrno}},
	}
	n, err = NotifyOnDeny(deny)
	if err != nil {
		t.Fatal(err)
	}
	if got := evalProfile(n, "seccomp", [6]uint64{1, filterNewListener}); len(got) != 1 || got[0] != "SCMP_ACT_NOTIFY" {
		t.Errorf("denylist: seccomp with a listener = %v", got)
	}
	if got := evalProfile(n, "keyctl", [6]uint64{}); len(got) != 1 || got[0] != "SCMP_ACT_NOTIFY" {
		t.Errorf("denylist: keyctl = %v", got)
	}

	// Conditions on seccomp: refused rather than guessed.
	cond := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Syscalls: []specs.LinuxSyscall{{Names: []string{"seccomp"}, Action: specs.ActErrno,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpEqualTo}}}},
	}
	var pe *ProfileError
	if _, err := NotifyOnDeny(cond); !asProfileError(err, &pe) {
		t.Errorf("conditional seccomp rule: err = %v, want ProfileError", err)
	}
}
