package seccomp

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sort"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// This file writes the filter for a single-architecture profile itself,
// smaller than libseccomp's program for it, and checks it against that
// program before it is used.
//
// Why: the sandbox pays for every instruction when it loads the filter
// (the kernel converts the classic program, JIT-compiles it and runs it
// for each syscall number to fill its action cache), and the default
// profile's program from libseccomp has 1083 instructions. Most of them
// spell out "everything else" for socket, personality and ioctl as
// complements (libseccomp cannot give one syscall a default action of its
// own), and an instruction or two for each of the ~330 allowed syscalls.
// Here a syscall's rules are tried in order and fall through to the
// profile's default, and syscall numbers with one action are tested as
// ranges in a binary search.
//
// Semantics are libseccomp's wherever they are used: compact declines a
// profile it cannot give the same meaning without reasoning about overlap
// (see compactRules), and sameDecisions runs both programs on every
// syscall number and on argument values around every constant the rules
// compare with; any difference, or an instruction the emulator does not
// know, keeps libseccomp's program.

// compactVersion is part of the disk cache's key: a change to the
// generator must not reuse programs the old one wrote.
const compactVersion = "c1"

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Classic BPF opcodes, the subset both the generator and the emulator use.
const (
	bpfLdWAbs = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJa     = 0x05 // BPF_JMP | BPF_JA
	bpfJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgtK   = 0x25 // BPF_JMP | BPF_JGT | BPF_K
	bpfJgeK   = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfJsetK  = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	bpfAndK   = 0x54 // BPF_ALU | BPF_AND | BPF_K
	bpfRetK   = 0x06 // BPF_RET | BPF_K
)

// seccomp return values, the kernel's.
const (
	retKillProcess uint32 = 0x80000000
	retKillThread  uint32 = 0x00000000
	retTrap        uint32 = 0x00030000
	retErrno       uint32 = 0x00050000
	retUserNotif   uint32 = 0x7fc00000
	retTrace       uint32 = 0x7ff00000
	retLog         uint32 = 0x7ffc0000
	retAllow       uint32 = 0x7fff0000
)

// x32 syscall numbers carry this bit on x86_64.
const x32Bit = 0x40000000

const auditArchX86_64 = 0xc000003e

// retFor is the filter's return value for an OCI action, as libseccomp
// encodes it (errno and trace data in the low 16 bits).
func retFor(a specs.LinuxSeccompAction, errnoRet *uint) uint32 {
	data := uint32(errnoEPERM)
	if errnoRet != nil {
		data = uint32(*errnoRet) & 0xffff
	}
	switch a {
	case specs.ActKill, specs.ActKillThread:
		return retKillThread
	case specs.ActKillProcess:
		return retKillProcess
	case specs.ActTrap:
		return retTrap
	case specs.ActErrno:
		return retErrno | data
	case specs.ActTrace:
		return retTrace | data
	case specs.ActLog:
		return retLog
	case specs.ActNotify:
		return retUserNotif
	}
	return retAllow
}

// cRule is one rule for one syscall: every comparison must hold.
type cRule struct {
	nr   uint32
	ret  uint32
	args []specs.LinuxSeccompArg
}

// compactInput is what compileHashed resolved: the native architecture's
// audit value, the default and bad-architecture returns, and the rules in
// profile order.
type compactInput struct {
	arch      uint32
	defRet    uint32
	badArcRet uint32
	rules     []cRule
}

// splitArgs turns one OCI syscall entry's args into rules as addRule does:
// one rule when every index differs, else one rule per comparison.
func splitArgs(args []specs.LinuxSeccompArg) [][]specs.LinuxSeccompArg {
	if len(args) == 0 {
		return [][]specs.LinuxSeccompArg{nil}
	}
	seen := map[uint]bool{}
	for _, a := range args {
		if seen[a.Index] {
			out := make([][]specs.LinuxSeccompArg, len(args))
			for i := range args {
				out[i] = args[i : i+1]
			}
			return out
		}
		seen[a.Index] = true
	}
	return [][]specs.LinuxSeccompArg{args}
}

// block is what one syscall number does: a return, or rules to try.
type block struct {
	ret   uint32
	rules []cRule // nil: ret unconditionally
}

// compactRules groups the rules by syscall. It declines (ok false) where
// the order of rules could matter to libseccomp: a syscall with an
// unconditional rule and any other rule, and two conditional rules with
// different returns that compactDisjoint cannot prove never both match.
// It also declines ordering comparisons (<, <=, >, >=).
func compactRules(in *compactInput) (map[uint32]block, bool) {
	by := map[uint32][]cRule{}
	var order []uint32
	for _, r := range in.rules {
		if _, ok := by[r.nr]; !ok {
			order = append(order, r.nr)
		}
		by[r.nr] = append(by[r.nr], r)
	}
	out := make(map[uint32]block, len(by))
	for _, nr := range order {
		rs := by[nr]
		uncond := false
		for _, r := range rs {
			if len(r.args) == 0 {
				uncond = true
			}
			for _, a := range r.args {
				// Only equality tests: libseccomp's ordering tests on 64-bit
				// arguments compare the halves in its own way.
				if a.Index > 5 || (a.Op != specs.OpEqualTo && a.Op != specs.OpNotEqual && a.Op != specs.OpMaskedEqual) {
					return nil, false
				}
			}
		}
		if uncond {
			if len(rs) != 1 {
				return nil, false
			}
			out[nr] = block{ret: rs[0].ret}
			continue
		}
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				if rs[i].ret != rs[j].ret && !compactDisjoint(rs[i].args, rs[j].args) {
					return nil, false
				}
			}
		}
		out[nr] = block{rules: rs}
	}
	return out, true
}

// maskValue64 is an equality-like comparison as (x & mask) == value.
func maskValue64(a specs.LinuxSeccompArg) (mask, value uint64, ok bool) {
	switch a.Op {
	case specs.OpEqualTo:
		return ^uint64(0), a.Value, true
	case specs.OpMaskedEqual:
		return a.Value, a.ValueTwo, true
	}
	return 0, 0, false
}

// compactDisjoint reports whether no argument values satisfy both rules:
// some argument is compared for equality (masked or not) in both, with
// values that differ on a bit both masks test.
func compactDisjoint(a, b []specs.LinuxSeccompArg) bool {
	for _, x := range a {
		mx, vx, ok := maskValue64(x)
		if !ok {
			continue
		}
		for _, y := range b {
			my, vy, ok := maskValue64(y)
			if !ok || x.Index != y.Index {
				continue
			}
			if ((vx&mx)^(vy&my))&mx&my != 0 {
				return true
			}
		}
	}
	return false
}

// ---- assembler ----

// op is one instruction with symbolic jumps. A conditional jump goes to
// target when its condition holds (or, with negate, when it does not) and
// falls through otherwise.
type op struct {
	code   uint16
	k      uint32
	target int // label; -1: none
	negate bool
	label  int // >= 0: this op is only a label
}

type asm struct {
	ops    []op
	labels int
}

func (a *asm) newLabel() int { a.labels++; return a.labels - 1 }
func (a *asm) mark(l int)    { a.ops = append(a.ops, op{label: l, target: -1}) }
func (a *asm) ld(off uint32) {
	a.ops = append(a.ops, op{code: bpfLdWAbs, k: off, target: -1, label: -1})
}
func (a *asm) and(k uint32) { a.ops = append(a.ops, op{code: bpfAndK, k: k, target: -1, label: -1}) }
func (a *asm) ret(k uint32) { a.ops = append(a.ops, op{code: bpfRetK, k: k, target: -1, label: -1}) }
func (a *asm) ja(l int)     { a.ops = append(a.ops, op{code: bpfJa, target: l, label: -1}) }

// jif jumps to l when (A code k) holds; jifNot when it does not.
func (a *asm) jif(code uint16, k uint32, l int) {
	a.ops = append(a.ops, op{code: code, k: k, target: l, label: -1})
}
func (a *asm) jifNot(code uint16, k uint32, l int) {
	a.ops = append(a.ops, op{code: code, k: k, target: l, negate: true, label: -1})
}

// assemble lays the program out. A conditional jump farther than 255
// instructions becomes a short jump over a JA; since that only lengthens
// the program, the layout is repeated until nothing more needs it.
func (a *asm) assemble() ([]byte, error) {
	far := make([]bool, len(a.ops))
	for {
		pos := make([]int, len(a.ops)+1)
		at := make([]int, a.labels)
		n := 0
		for i, o := range a.ops {
			pos[i] = n
			switch {
			case o.label >= 0:
				at[o.label] = n
			case far[i]:
				n += 2
			default:
				n++
			}
		}
		pos[len(a.ops)] = n
		if n > 4096 {
			return nil, fmt.Errorf("seccomp: compact: %d instructions, more than the kernel takes", n)
		}
		grew := false
		for i, o := range a.ops {
			if o.label >= 0 || o.target < 0 || o.code == bpfJa || far[i] {
				continue
			}
			if at[o.target]-(pos[i]+1) > 255 {
				far[i] = true
				grew = true
			}
		}
		if grew {
			continue
		}
		out := make([]byte, 0, 8*n)
		put := func(code uint16, jt, jf uint8, k uint32) {
			out = binary.LittleEndian.AppendUint16(out, code)
			out = append(out, jt, jf)
			out = binary.LittleEndian.AppendUint32(out, k)
		}
		for i, o := range a.ops {
			switch {
			case o.label >= 0:
			case o.code == bpfJa:
				d := at[o.target] - (pos[i] + 1)
				if d < 0 {
					return nil, fmt.Errorf("seccomp: compact: backward jump")
				}
				put(bpfJa, 0, 0, uint32(d))
			case o.target < 0:
				put(o.code, 0, 0, o.k)
			case far[i]:
				// Taken: into the JA; not taken: over it.
				if o.negate {
					put(o.code, 1, 0, o.k)
				} else {
					put(o.code, 0, 1, o.k)
				}
				put(bpfJa, 0, 0, uint32(at[o.target]-(pos[i]+2)))
			default:
				d := at[o.target] - (pos[i] + 1)
				if d < 0 {
					return nil, fmt.Errorf("seccomp: compact: backward jump")
				}
				if o.negate {
					put(o.code, 0, uint8(d), o.k)
				} else {
					put(o.code, uint8(d), 0, o.k)
				}
			}
		}
		if !endsInRet(out) {
			return nil, fmt.Errorf("seccomp: compact: program does not end in a return")
		}
		return out, nil
	}
}

func endsInRet(prog []byte) bool {
	return len(prog) >= 8 && binary.LittleEndian.Uint16(prog[len(prog)-8:]) == bpfRetK
}

// ---- generator ----

// compact returns the program for in, or ok false where compactRules
// declines it.
func compact(in *compactInput) ([]byte, bool, error) {
	blocks, ok := compactRules(in)
	if !ok {
		return nil, false, nil
	}
	a := &asm{}
	bad := a.newLabel()
	a.ld(offArch)
	a.jifNot(bpfJeqK, in.arch, bad)
	a.ld(offNr)
	if in.arch == auditArchX86_64 {
		// x32 numbers (bit 30) are another ABI; -1 is no syscall at all
		// and gets the default, as libseccomp has it.
		tree := a.newLabel()
		a.jifNot(bpfJgeK, x32Bit, tree)
		a.jif(bpfJeqK, 0xffffffff, tree)
		a.ja(bad)
		a.mark(tree)
	}
	ivs := intervals(blocks, in.defRet)
	emitTree(a, ivs, in.defRet)
	a.mark(bad)
	a.ret(in.badArcRet)
	prog, err := a.assemble()
	if err != nil {
		return nil, false, err
	}
	return prog, true, nil
}

// interval is [start, next interval's start) with one block.
type interval struct {
	start uint32
	b     block
}

// intervals covers every syscall number: runs of numbers with the same
// unconditional return merge, gaps get the default.
func intervals(blocks map[uint32]block, defRet uint32) []interval {
	nrs := make([]uint32, 0, len(blocks))
	for nr := range blocks {
		nrs = append(nrs, nr)
	}
	sort.Slice(nrs, func(i, j int) bool { return nrs[i] < nrs[j] })
	raw := []interval{{start: 0, b: block{ret: defRet}}}
	for _, nr := range nrs {
		if last := &raw[len(raw)-1]; last.start == nr {
			last.b = blocks[nr]
		} else {
			raw = append(raw, interval{start: nr, b: blocks[nr]})
		}
		if nr != ^uint32(0) {
			raw = append(raw, interval{start: nr + 1, b: block{ret: defRet}})
		}
	}
	out := raw[:1]
	for _, iv := range raw[1:] {
		last := out[len(out)-1]
		if iv.b.rules == nil && last.b.rules == nil && iv.b.ret == last.b.ret {
			continue
		}
		out = append(out, iv)
	}
	return out
}

// emitTree is a binary search over the intervals' starts; A holds the
// syscall number.
func emitTree(a *asm, ivs []interval, defRet uint32) {
	if len(ivs) == 1 {
		emitBlock(a, ivs[0].b, defRet)
		return
	}
	mid := len(ivs) / 2
	right := a.newLabel()
	a.jif(bpfJgeK, ivs[mid].start, right)
	emitTree(a, ivs[:mid], defRet)
	a.mark(right)
	emitTree(a, ivs[mid:], defRet)
}

// emitBlock returns the block's action; rules are tried in order, and
// none matching returns the default.
func emitBlock(a *asm, b block, defRet uint32) {
	if b.rules == nil {
		a.ret(b.ret)
		return
	}
	if emitSwitch(a, b.rules, defRet) {
		return
	}
	emitRules(a, b.rules, defRet)
}

// lowEq returns the low-half value and mask of a masked comparison that
// ignores the upper half of its argument (as the profile's comparisons of
// int arguments do).
func lowEq(c specs.LinuxSeccompArg) (value, mask uint32, ok bool) {
	if c.Op != specs.OpMaskedEqual || c.Value>>32 != 0 || c.ValueTwo>>32 != 0 {
		return 0, 0, false
	}
	return uint32(c.ValueTwo), uint32(c.Value), true
}

// emitSwitch handles rules that all test one argument's low half, each
// either for one value (a full mask; the rule's other comparisons are
// decided after it) or for a masked pattern (a region, its only
// comparison). With no regions, other values get the default; with
// regions of one return that, disjoint, cover every value the points do
// not (libseccomp needs such complements to say "else"), other values get
// that return. Then it is one load and a comparison per point, instead of
// a rule for each region. It reports false, emitting nothing, for rules of
// any other shape.
func emitSwitch(a *asm, rules []cRule, defRet uint32) bool {
	if len(rules) == 0 || len(rules[0].args) == 0 {
		return false
	}
	for _, c := range rules[0].args {
		if tryIndex(a, rules, c.Index, defRet) {
			return true
		}
	}
	return false
}

func tryIndex(a *asm, rules []cRule, idx uint, defRet uint32) bool {
	type region struct{ v, m uint32 }
	points := map[uint32][]cRule{}
	var order []uint32
	var regions []region
	regionRet := uint32(0)
	for _, r := range rules {
		var rest []specs.LinuxSeccompArg
		found := false
		var v, m uint32
		for _, c := range r.args {
			if c.Index != idx || found {
				rest = append(rest, c)
				continue
			}
			var ok bool
			if v, m, ok = lowEq(c); !ok {
				return false
			}
			found = true
		}
		switch {
		case !found:
			return false
		case m == 0xffffffff:
			if _, ok := points[v]; !ok {
				order = append(order, v)
			}
			points[v] = append(points[v], cRule{nr: r.nr, ret: r.ret, args: rest})
		default:
			if len(rest) != 0 || v&^m != 0 || (len(regions) > 0 && r.ret != regionRet) {
				return false
			}
			regions = append(regions, region{v, m})
			regionRet = r.ret
		}
	}
	elseRet := defRet
	if len(regions) > 0 {
		// Disjoint from each other and from the points, and together with
		// the points every 32-bit value: then their sizes add up to 2^32.
		total := uint64(len(order))
		for i, x := range regions {
			for _, y := range regions[i+1:] {
				if (x.v^y.v)&x.m&y.m == 0 {
					return false
				}
			}
			for _, pv := range order {
				if pv&x.m == x.v {
					return false
				}
			}
			total += uint64(1) << (32 - bits.OnesCount32(x.m))
		}
		if total != 1<<32 {
			return false
		}
		elseRet = regionRet
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	a.ld(argLo(idx))
	// A point that returns what every other value returns needs no test.
	kept := order[:0]
	for _, v := range order {
		if sub := points[v]; len(sub[0].args) != 0 || sub[0].ret != elseRet {
			kept = append(kept, v)
		}
	}
	order = kept
	labels := make([]int, len(order))
	for i, v := range order {
		labels[i] = a.newLabel()
		a.jif(bpfJeqK, v, labels[i])
	}
	a.ret(elseRet)
	for i, v := range order {
		a.mark(labels[i])
		sub := points[v]
		if len(sub[0].args) == 0 {
			// Unconditional for this value; compactRules proved any
			// other rule here has the same return or never matches.
			a.ret(sub[0].ret)
			continue
		}
		if !emitSwitch(a, sub, defRet) {
			emitRules(a, sub, defRet)
		}
	}
	return true
}

// emitRules tries the rules in order; none matching returns the default.
func emitRules(a *asm, rules []cRule, defRet uint32) {
	for _, r := range rules {
		next := a.newLabel()
		for _, c := range r.args {
			emitCmp(a, c, next)
		}
		a.ret(r.ret)
		a.mark(next)
	}
	a.ret(defRet)
}

// argLo and argHi are the offsets of an argument's halves in seccomp_data
// on a little-endian host (the architectures compact is used for).
func argLo(i uint) uint32 { return offArgs + 8*uint32(i) }
func argHi(i uint) uint32 { return offArgs + 8*uint32(i) + 4 }

// emitCmp jumps to fail unless the 64-bit comparison holds.
func emitCmp(a *asm, c specs.LinuxSeccompArg, fail int) {
	lo, hi := argLo(c.Index), argHi(c.Index)
	v := c.Value
	vh, vl := uint32(v>>32), uint32(v)
	switch c.Op {
	case specs.OpMaskedEqual:
		m, want := c.Value, c.ValueTwo
		for _, half := range []struct {
			off     uint32
			m, want uint32
		}{{hi, uint32(m >> 32), uint32(want >> 32)}, {lo, uint32(m), uint32(want)}} {
			switch {
			case half.want&^half.m != 0:
				a.ja(fail) // bits the mask clears can never be set
			case half.m == 0:
				// (x & 0) == 0 always holds
			default:
				a.ld(half.off)
				if half.m != 0xffffffff {
					a.and(half.m)
				}
				a.jifNot(bpfJeqK, half.want, fail)
			}
		}
	case specs.OpEqualTo:
		a.ld(hi)
		a.jifNot(bpfJeqK, vh, fail)
		a.ld(lo)
		a.jifNot(bpfJeqK, vl, fail)
	case specs.OpNotEqual:
		ok := a.newLabel()
		a.ld(hi)
		a.jifNot(bpfJeqK, vh, ok)
		a.ld(lo)
		a.jif(bpfJeqK, vl, fail)
		a.mark(ok)
	}
}

// ---- emulator and check ----

// filterInput is the input of one run: what the kernel hands the filter.
type filterInput struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

func (d *filterInput) word(off uint32) (uint32, bool) {
	switch {
	case off == offNr:
		return d.nr, true
	case off == offArch:
		return d.arch, true
	case off >= offArgs && off < offArgs+48 && off%4 == 0:
		v := d.args[(off-offArgs)/8]
		if (off-offArgs)%8 == 4 {
			return uint32(v >> 32), true
		}
		return uint32(v), true
	}
	return 0, false // the instruction pointer, or out of range
}

// run emulates prog on d; ok false for an instruction it does not know or
// a program that runs off its end.
func run(prog []byte, d *filterInput) (ret uint32, ok bool) {
	n := len(prog) / 8
	var acc uint32
	for pc := 0; pc < n; pc++ {
		i := prog[8*pc:]
		code := binary.LittleEndian.Uint16(i)
		jt, jf := int(i[2]), int(i[3])
		k := binary.LittleEndian.Uint32(i[4:])
		switch code {
		case bpfLdWAbs:
			v, ok := d.word(k)
			if !ok {
				return 0, false
			}
			acc = v
		case bpfAndK:
			acc &= k
		case bpfJa:
			pc += int(k)
		case bpfJeqK, bpfJgtK, bpfJgeK, bpfJsetK:
			var c bool
			switch code {
			case bpfJeqK:
				c = acc == k
			case bpfJgtK:
				c = acc > k
			case bpfJgeK:
				c = acc >= k
			default:
				c = acc&k != 0
			}
			if c {
				pc += jt
			} else {
				pc += jf
			}
		case bpfRetK:
			return k, true
		default:
			return 0, false
		}
	}
	return 0, false
}

// sameDecisions runs both programs on every syscall number below 1024,
// the x32 range, edge numbers and foreign architectures, and, for the
// syscalls with argument rules, on argument values around each constant
// the rules name. It reports the first difference.
func sameDecisions(a, b []byte, in *compactInput) error {
	check := func(d *filterInput) error {
		ra, oka := run(a, d)
		rb, okb := run(b, d)
		if !oka || !okb || ra != rb {
			return fmt.Errorf("seccomp: compact: differs for nr %#x arch %#x args %#x: %#x (%v) against %#x (%v)",
				d.nr, d.arch, d.args, ra, oka, rb, okb)
		}
		return nil
	}
	nrs := []uint32{0x3fffffff, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff, 0xffff, 0x10000}
	for nr := uint32(0); nr < 1024; nr++ {
		nrs = append(nrs, nr, x32Bit|nr)
	}
	for _, arch := range []uint32{in.arch, 0x40000003, 0, 0xffffffff, in.arch ^ 1} {
		for _, nr := range nrs {
			if err := check(&filterInput{nr: nr, arch: arch}); err != nil {
				return err
			}
		}
	}
	for nr, vecs := range argVectors(in.rules) {
		for _, args := range vecs {
			if err := check(&filterInput{nr: nr, arch: in.arch, args: args}); err != nil {
				return err
			}
		}
	}
	return nil
}

// argVectors returns, per syscall with argument rules, argument vectors
// that put each compared argument on both sides of every comparison. The
// base values of an argument are 0, all ones, and every constant the
// syscall's rules compare it with, with its neighbours and with its upper
// half cleared, set, or copied from the lower; a masked comparison adds
// its value with each masked bit flipped and with the unmasked bits set.
// Each rule is tried with its arguments holding, and with one of them at
// a time set to each base value and to its own comparison's values; with
// few base values, every combination of them is tried as well.
func argVectors(rules []cRule) map[uint32][][6]uint64 {
	type key struct {
		nr  uint32
		idx uint
	}
	bases := map[key]map[uint64]bool{}
	own := func(c specs.LinuxSeccompArg) []uint64 {
		var out []uint64
		if c.Op == specs.OpMaskedEqual {
			m, v := c.Value, c.ValueTwo
			out = append(out, v, v|^m, v&m)
			for b := 0; b < 64; b++ {
				if m&(1<<b) != 0 {
					out = append(out, v^1<<b, (v|^m)^1<<b)
				}
			}
		}
		return out
	}
	for _, r := range rules {
		for _, c := range r.args {
			k := key{r.nr, c.Index}
			set := bases[k]
			if set == nil {
				set = map[uint64]bool{0: true, ^uint64(0): true}
				bases[k] = set
			}
			x := c.Value
			if c.Op == specs.OpMaskedEqual {
				x = c.ValueTwo
				set[x|^c.Value] = true
			}
			set[x], set[x+1], set[x-1] = true, true, true
			set[x^0xffffffff00000000] = true
			set[uint64(uint32(x))] = true
			set[x<<32|x&0xffffffff] = true
		}
	}
	// Each base set as a sorted list, once.
	lists := make(map[key][]uint64, len(bases))
	for k, set := range bases {
		l := make([]uint64, 0, len(set))
		for v := range set {
			l = append(l, v)
		}
		sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
		lists[k] = l
	}
	out := map[uint32][][6]uint64{}
	for _, r := range rules {
		if len(r.args) == 0 {
			continue
		}
		sat, ok := satisfying(r.args)
		if !ok {
			continue
		}
		vecs := append(out[r.nr], sat)
		for _, c := range r.args {
			base := lists[key{r.nr, c.Index}]
			for _, x := range append(base[:len(base):len(base)], own(c)...) {
				v := sat
				v[c.Index] = x
				vecs = append(vecs, v)
			}
		}
		out[r.nr] = vecs
	}
	// Values that satisfy two rules' comparisons of one argument at once,
	// where they can: an overlap the programs may order differently.
	for i, r := range rules {
		for _, q := range rules[i+1:] {
			if q.nr != r.nr {
				continue
			}
			sr, okr := satisfying(r.args)
			sq, okq := satisfying(q.args)
			if !okr || !okq {
				continue
			}
			merged := sr
			for _, c := range q.args {
				merged[c.Index] |= sq[c.Index]
			}
			out[r.nr] = append(out[r.nr], merged)
		}
	}
	byNr := map[uint32][]key{}
	for k := range lists {
		byNr[k.nr] = append(byNr[k.nr], k)
	}
	for nr, keys := range byNr {
		total := 1
		for _, k := range keys {
			total *= len(lists[k])
		}
		if total > 1<<14 {
			continue
		}
		for n := 0; n < total; n++ {
			var v [6]uint64
			q := n
			for _, k := range keys {
				l := lists[k]
				v[k.idx] = l[q%len(l)]
				q /= len(l)
			}
			out[nr] = append(out[nr], v)
		}
	}
	return out
}

// satisfying returns argument values for which every comparison holds,
// if it finds them.
func satisfying(args []specs.LinuxSeccompArg) ([6]uint64, bool) {
	var v [6]uint64
	for _, c := range args {
		var x uint64
		switch c.Op {
		case specs.OpMaskedEqual:
			x = c.ValueTwo
		case specs.OpEqualTo, specs.OpGreaterEqual, specs.OpLessEqual:
			x = c.Value
		case specs.OpNotEqual:
			x = ^c.Value
		case specs.OpGreaterThan:
			x = c.Value + 1
		case specs.OpLessThan:
			x = c.Value - 1
		}
		v[c.Index] = x
	}
	for _, c := range args {
		if !holds(c, v[c.Index]) {
			return v, false
		}
	}
	return v, true
}

func holds(c specs.LinuxSeccompArg, x uint64) bool {
	switch c.Op {
	case specs.OpMaskedEqual:
		return x&c.Value == c.ValueTwo
	case specs.OpEqualTo:
		return x == c.Value
	case specs.OpNotEqual:
		return x != c.Value
	case specs.OpGreaterThan:
		return x > c.Value
	case specs.OpGreaterEqual:
		return x >= c.Value
	case specs.OpLessThan:
		return x < c.Value
	case specs.OpLessEqual:
		return x <= c.Value
	}
	return false
}
