//go:build linux && cgo

package seccomp

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand"
	"runtime"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

// both compiles p with and without compact; compact reports whether the
// first one took compact's program.
func both(t *testing.T, p *specs.LinuxSeccomp) (withCompact, libOnly *Program) {
	t.Helper()
	h := ProfileHash(p)
	a, _, err := compileWith(p, h, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := compileWith(p, h, false)
	if err != nil {
		t.Fatal(err)
	}
	if b.compact {
		t.Fatal("compileWith(false) used compact")
	}
	return a, b
}

// validClassic checks what the kernel's classic BPF checker checks of
// jumps: every target inside the program, the last instruction a return.
func validClassic(prog []byte) error {
	n := len(prog) / 8
	if n == 0 || n > 4096 || len(prog)%8 != 0 || !endsInRet(prog) {
		return fmt.Errorf("%d bytes, or no final return", len(prog))
	}
	for pc := 0; pc < n; pc++ {
		i := prog[8*pc:]
		code := binary.LittleEndian.Uint16(i)
		switch code {
		case bpfJa:
			if pc+1+int(binary.LittleEndian.Uint32(i[4:])) >= n {
				return fmt.Errorf("ja at %d out of range", pc)
			}
		case bpfJeqK, bpfJgtK, bpfJgeK, bpfJsetK:
			if pc+1+int(i[2]) >= n || pc+1+int(i[3]) >= n {
				return fmt.Errorf("jump at %d out of range", pc)
			}
		}
	}
	return nil
}

// randomArgs draws argument vectors that hit the constants of the rules
// about as often as arbitrary values: random 64-bit words, small ints,
// sign-extended negatives, and each rule constant with random high halves,
// single bits flipped, or another constant's bits added.
func randomArgs(r *rand.Rand, consts []uint64) [6]uint64 {
	var v [6]uint64
	for i := range v {
		switch r.Intn(6) {
		case 0:
			v[i] = r.Uint64()
		case 1:
			v[i] = uint64(r.Intn(64))
		case 2:
			v[i] = uint64(int64(-r.Intn(64)))
		default:
			if len(consts) == 0 {
				v[i] = r.Uint64()
				continue
			}
			c := consts[r.Intn(len(consts))]
			switch r.Intn(5) {
			case 0:
				c ^= 1 << r.Intn(64)
			case 1:
				c = c&0xffffffff | uint64(r.Uint32())<<32
			case 2:
				c |= consts[r.Intn(len(consts))] // into two rules' overlap
			}
			v[i] = c
		}
	}
	return v
}

func profileConsts(p *specs.LinuxSeccomp) []uint64 {
	var out []uint64
	for _, sc := range p.Syscalls {
		for _, a := range sc.Args {
			out = append(out, a.Value, a.ValueTwo, a.Value&a.ValueTwo, a.ValueTwo|^a.Value)
		}
	}
	return out
}

// agree runs both programs on every syscall number below 600 with n
// random argument vectors each, on the native architecture.
func agree(t *testing.T, a, b []byte, arch uint32, consts []uint64, n int, seed int64) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	for nr := uint32(0); nr < 600; nr++ {
		for i := 0; i < n; i++ {
			d := &filterInput{nr: nr, arch: arch, args: randomArgs(r, consts)}
			ra, oka := run(a, d)
			rb, okb := run(b, d)
			if !oka || !okb || ra != rb {
				t.Fatalf("nr %d args %#x: compact %#x (%v), libseccomp %#x (%v)", nr, d.args, ra, oka, rb, okb)
			}
		}
	}
}

func nativeAudit(t *testing.T) uint32 {
	t.Helper()
	p, _, err := compileWith(&specs.LinuxSeccomp{DefaultAction: specs.ActAllow}, Hash{}, false)
	if err != nil {
		t.Fatal(err)
	}
	// libseccomp's first instructions: load the arch, compare with ours.
	return binary.LittleEndian.Uint32(p.Filter[12:])
}

func TestCompactDefaultProfile(t *testing.T) {
	p := DefaultProfile()
	c, lib := both(t, p)
	if !c.compact {
		t.Fatal("the default profile did not get the compact program")
	}
	if err := validClassic(c.Filter); err != nil {
		t.Fatal(err)
	}
	t.Logf("default profile: %d instructions, libseccomp %d", len(c.Filter)/8, len(lib.Filter)/8)
	// The point of it: a program well under half of libseccomp's.
	if 2*len(c.Filter) > len(lib.Filter) {
		t.Errorf("compact program %d instructions, libseccomp's %d", len(c.Filter)/8, len(lib.Filter)/8)
	}
	agree(t, c.Filter, lib.Filter, nativeAudit(t), profileConsts(p), 200, 1)
}

// TestCompactRandomProfiles compiles random profiles both ways; wherever
// compact's program is taken it must decide as libseccomp's does on
// vectors drawn independently of the ones compact checked itself with.
func TestCompactRandomProfiles(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	names := []string{"read", "write", "socket", "ioctl", "personality", "clone", "chmod", "openat", "kill", "mmap", "futex", "prctl"}
	actions := []specs.LinuxSeccompAction{specs.ActAllow, specs.ActErrno, specs.ActKillProcess, specs.ActTrap, specs.ActLog}
	ops := []specs.LinuxSeccompOperator{specs.OpMaskedEqual, specs.OpMaskedEqual, specs.OpEqualTo, specs.OpNotEqual,
		specs.OpLessThan, specs.OpLessEqual, specs.OpGreaterThan, specs.OpGreaterEqual}
	val := func() uint64 {
		switch r.Intn(4) {
		case 0:
			return r.Uint64()
		case 1:
			return uint64(r.Intn(16))
		case 2:
			return uint64(r.Uint32())
		}
		return 1 << r.Intn(64)
	}
	arch := nativeAudit(t)
	taken, declined := 0, 0
	for n := 0; n < 300; n++ {
		p := &specs.LinuxSeccomp{DefaultAction: actions[r.Intn(len(actions))], Architectures: []specs.Arch{scmpArchForGOARCH(runtime.GOARCH)}}
		if p.DefaultAction == specs.ActAllow && r.Intn(2) == 0 {
			p.DefaultAction = specs.ActErrno
		}
		for i := 0; i < 1+r.Intn(8); i++ {
			sc := specs.LinuxSyscall{Names: []string{names[r.Intn(len(names))]}, Action: actions[r.Intn(len(actions))]}
			if sc.Action == specs.ActErrno && r.Intn(2) == 0 {
				e := uint(1 + r.Intn(100))
				sc.ErrnoRet = &e
			}
			for j := 0; j < r.Intn(3); j++ {
				a := specs.LinuxSeccompArg{Index: uint(r.Intn(3)), Op: ops[r.Intn(len(ops))], Value: val()}
				if a.Op == specs.OpMaskedEqual {
					a.ValueTwo = a.Value & val()
				}
				sc.Args = append(sc.Args, a)
			}
			p.Syscalls = append(p.Syscalls, sc)
		}
		h := ProfileHash(p)
		c, _, err := compileWith(p, h, true)
		if err != nil {
			continue // libseccomp refuses some random combinations (EEXIST)
		}
		lib, _, err := compileWith(p, h, false)
		if err != nil {
			t.Fatal(err)
		}
		if !c.compact {
			declined++
			continue
		}
		taken++
		if err := validClassic(c.Filter); err != nil {
			t.Fatalf("profile %d: %v", n, err)
		}
		func() {
			defer func() {
				if t.Failed() {
					j, _ := json.Marshal(p)
					t.Logf("profile %d: %s", n, j)
				}
			}()
			agree(t, c.Filter, lib.Filter, arch, profileConsts(p), 8, int64(n))
		}()
	}
	t.Logf("compact taken for %d profiles, declined for %d", taken, declined)
	if taken < 50 || declined == 0 {
		t.Errorf("taken %d, declined %d: the random profiles do not exercise both paths", taken, declined)
	}
}

func TestCompactFarJumps(t *testing.T) {
	// Many syscalls with argument rules: the search tree's jumps to the
	// right halves span more than 255 instructions.
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno}
	for nr := 0; nr < 300; nr++ {
		for _, v := range []uint64{1, 2} {
			p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{fmt.Sprint(nr)}, Action: specs.ActAllow,
				Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpMaskedEqual, Value: 0xffffffff, ValueTwo: v * uint64(nr+1)}}})
		}
	}
	// Numbers, not names, so resolve through libseccomp's names.
	for i := range p.Syscalls {
		nr := 0
		fmt.Sscan(p.Syscalls[i].Names[0], &nr)
		name, err := libseccomp.ScmpSyscall(nr).GetName()
		if err != nil || name == "" {
			p.Syscalls[i].Names = []string{"read"}
			p.Syscalls[i].Args[0].ValueTwo = uint64(1000 + i)
			continue
		}
		p.Syscalls[i].Names = []string{name}
	}
	c, lib := both(t, p)
	if !c.compact {
		_, in, _ := compileWith(p, ProfileHash(p), true)
		prog, ok, err := compact(in)
		t.Fatalf("compact declined: ok %v err %v check %v", ok, err, sameDecisions(prog, lib.Filter, in))
	}
	if err := validClassic(c.Filter); err != nil {
		t.Fatal(err)
	}
	jas := 0
	for i := 0; i+8 <= len(c.Filter); i += 8 {
		if binary.LittleEndian.Uint16(c.Filter[i:]) == bpfJa {
			jas++
		}
	}
	if jas < 4 { // the x32 test has one of its own
		t.Errorf("%d long jumps in %d instructions: the test no longer reaches far", jas, len(c.Filter)/8)
	}
	agree(t, c.Filter, lib.Filter, nativeAudit(t), profileConsts(p), 20, 3)
}

// TestCompactCheckCatches shows that sameDecisions, the check every
// compact program passes before use, finds a program that is wrong in one
// return, one comparison, or one argument's half.
func TestCompactCheckCatches(t *testing.T) {
	p := DefaultProfile()
	c, lib := both(t, p)
	_, in, err := compileWith(p, ProfileHash(p), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameDecisions(c.Filter, lib.Filter, in); err != nil {
		t.Fatalf("control: %v", err)
	}
	mutated := 0
	for i := 0; i+8 <= len(c.Filter); i += 8 {
		code := binary.LittleEndian.Uint16(c.Filter[i:])
		k := binary.LittleEndian.Uint32(c.Filter[i+4:])
		var nk uint32
		switch {
		case code == bpfRetK && k == retAllow:
			nk = retErrno | 1
		case code == bpfJeqK && k > 1 && k < 0x10000:
			nk = k + 1
		case code == bpfLdWAbs && k >= offArgs:
			nk = k ^ 4 // the other half of the argument
		default:
			continue
		}
		m := append([]byte(nil), c.Filter...)
		binary.LittleEndian.PutUint32(m[i+4:], nk)
		mutated++
		if err := sameDecisions(m, lib.Filter, in); err == nil {
			t.Errorf("instruction %d (%04x k=%#x → %#x) changed and not caught", i/8, code, k, nk)
		}
	}
	if mutated < 50 {
		t.Errorf("only %d mutations", mutated)
	}
}

// TestCompactDeclines: rules whose overlap libseccomp resolves its own way
// keep libseccomp's program.
func TestCompactDeclines(t *testing.T) {
	for name, sc := range map[string][]specs.LinuxSyscall{
		"overlapping ranges": {
			{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpGreaterThan, Value: 5}}},
			{Names: []string{"read"}, Action: specs.ActTrap, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpLessThan, Value: 10}}},
		},
		// Both masks hold for 0x110: libseccomp and rule order disagree
		// there, and a disjointness test that compares the wrong bits
		// would take it.
		"overlapping masks": {
			{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpMaskedEqual, Value: 0xf0, ValueTwo: 0x10}}},
			{Names: []string{"personality"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpMaskedEqual, Value: 0xf00, ValueTwo: 0x100}}},
		},
		"unconditional and conditional": {
			{Names: []string{"read"}, Action: specs.ActAllow},
			{Names: []string{"read"}, Action: specs.ActTrap, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpEqualTo, Value: 5}}},
		},
	} {
		p := &specs.LinuxSeccomp{DefaultAction: specs.ActKillProcess, Syscalls: sc}
		c, lib, err := func() (*Program, *Program, error) {
			h := ProfileHash(p)
			c, _, err := compileWith(p, h, true)
			if err != nil {
				return nil, nil, err
			}
			lib, _, err := compileWith(p, h, false)
			return c, lib, err
		}()
		if err != nil {
			continue // libseccomp refuses the second case on some versions
		}
		if c.compact || string(c.Filter) != string(lib.Filter) {
			t.Errorf("%s: compact program taken", name)
		}
	}
}

func TestCompactDisjoint(t *testing.T) {
	m := func(idx uint, mask, v uint64) []specs.LinuxSeccompArg {
		return []specs.LinuxSeccompArg{{Index: idx, Op: specs.OpMaskedEqual, Value: mask, ValueTwo: v}}
	}
	eq := func(idx uint, v uint64) []specs.LinuxSeccompArg {
		return []specs.LinuxSeccompArg{{Index: idx, Op: specs.OpEqualTo, Value: v}}
	}
	for _, c := range []struct {
		name string
		a, b []specs.LinuxSeccompArg
		want bool
	}{
		{"one bit, both values", m(0, 1, 1), m(0, 1, 0), true},
		{"masks on different bits (0x110 matches both)", m(0, 0xf0, 0x10), m(0, 0xf00, 0x100), false},
		{"a shared bit differs", m(0, 0xff, 0x10), m(0, 0xf0, 0x20), true},
		{"equal values", eq(0, 5), eq(0, 6), true},
		{"equality inside a mask", eq(0, 0x10), m(0, 0xf0, 0x10), false},
		{"different arguments", m(0, 1, 1), m(1, 1, 0), false},
	} {
		if got := compactDisjoint(c.a, c.b); got != c.want {
			t.Errorf("%s: disjoint %v, want %v", c.name, got, c.want)
		}
	}
}
