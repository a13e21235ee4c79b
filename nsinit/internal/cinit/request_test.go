//go:build linux && cgo

package cinit

import (
	"encoding/binary"
	"errors"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func encode(t *testing.T, r Request) []byte {
	t.Helper()
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRequestRoundTrip: what Encode writes, the init's parser reads back
// unchanged, empty strings and environments included.
func TestRequestRoundTrip(t *testing.T) {
	cases := []Request{
		{Type: ReqExec, ID: 1, Cwd: "/workspace", Path: "/usr/bin:/bin", Argv: []string{"sh", "-c", "echo hi"}, Env: []string{"A=1", "B="}},
		{Type: ReqExec, ID: 1<<64 - 1, Flags: ExecFD0 | ExecFD2, Argv: []string{"true", ""}},
		{Type: ReqExec, ID: 7, Argv: []string{"x"}, Env: []string{""}},
		{Type: ReqSignal, ID: 2, Target: 1, Sig: 15, Flags: SigGroup},
		{Type: ReqSignalAll, ID: 3, Sig: 9},
	}
	for _, want := range cases {
		nfds := 0
		for _, bit := range []uint32{ExecFD0, ExecFD1, ExecFD2} {
			if want.Flags&bit != 0 && want.Type == ReqExec {
				nfds++
			}
		}
		got := parseRequest(encode(t, want), nfds)
		if got.Errno != 0 {
			t.Errorf("%+v: parse: %v (%s)", want, got.Errno, got.Why)
			continue
		}
		if got.Type != want.Type || got.ID != want.ID || got.Target != want.Target || got.Flags != want.Flags ||
			got.Sig != want.Sig || got.Cwd != want.Cwd || got.Path != want.Path ||
			!slices.Equal(got.Argv, want.Argv) || !slices.Equal(got.Env, want.Env) {
			t.Errorf("parsed %+v, want %+v", got.Request, want)
		}
	}
}

// TestRequestRefused is the parser's attack table: every malformed
// request is refused with an errno and a reason, never read past its end.
func TestRequestRefused(t *testing.T) {
	good := encode(t, Request{Type: ReqExec, ID: 9, Argv: []string{"true"}, Env: []string{"A=1"}})
	ne := binary.NativeEndian
	with := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good)) }
	cases := []struct {
		name string
		b    []byte
		nfds int
		want unix.Errno
	}{
		{"empty", nil, 0, unix.EPROTO},
		{"truncated header", good[:reqHeaderSize-1], 0, unix.EPROTO},
		{"truncated strings", good[:len(good)-1], 0, unix.EPROTO},
		{"extra byte", append(slices.Clone(good), 'x'), 0, unix.EPROTO},
		{"bad magic", with(func(b []byte) []byte { b[0] ^= 1; return b }), 0, unix.EPROTO},
		{"reserved set", with(func(b []byte) []byte { b[44] = 1; return b }), 0, unix.EPROTO},
		{"unknown type", with(func(b []byte) []byte { ne.PutUint32(b[4:], 99); return b }), 0, unix.EPROTO},
		{"huge argc", with(func(b []byte) []byte { ne.PutUint32(b[32:], 1<<31); return b }), 0, unix.E2BIG},
		{"huge envc", with(func(b []byte) []byte { ne.PutUint32(b[36:], ^uint32(0)); return b }), 0, unix.E2BIG},
		{"argc past the strings", with(func(b []byte) []byte { ne.PutUint32(b[32:], 50); return b }), 0, unix.EPROTO},
		{"huge strings_len", with(func(b []byte) []byte { ne.PutUint32(b[40:], ^uint32(0)); return b }), 0, unix.EPROTO},
		{"no argv", with(func(b []byte) []byte { ne.PutUint32(b[32:], 0); ne.PutUint32(b[36:], 2); return b }), 0, unix.EINVAL},
		{"unterminated last string", with(func(b []byte) []byte { b[len(b)-1] = 'x'; return b }), 0, unix.EPROTO},
		{"fd without its flag", good, 1, unix.EPROTO},
		{"flag without its fd", with(func(b []byte) []byte { ne.PutUint32(b[24:], ExecFD1); return b }), 0, unix.EPROTO},
		{"unknown flag", with(func(b []byte) []byte { ne.PutUint32(b[24:], 1<<20); return b }), 0, unix.EINVAL},
		{"empty argv[0]", encode(t, Request{Type: ReqExec, Argv: []string{""}}), 0, unix.EINVAL},
		{"signal with strings", with(func(b []byte) []byte { ne.PutUint32(b[4:], ReqSignal); return b }), 0, unix.EPROTO},
		{"signal with an fd", encode(t, Request{Type: ReqSignal, Sig: 1}), 1, unix.EPROTO},
		{"bad signal", encode(t, Request{Type: ReqSignal, Sig: 65}), 0, unix.EINVAL},
		{"negative signal", encode(t, Request{Type: ReqSignalAll, Sig: -1}), 0, unix.EINVAL},
		{"group flag on signal-all", encode(t, Request{Type: ReqSignalAll, Sig: 1, Flags: SigGroup}), 0, unix.EINVAL},
	}
	for _, c := range cases {
		got := parseRequest(c.b, c.nfds)
		if got.Errno != c.want || got.Why == "" {
			t.Errorf("%s: errno %v (%q), want %v", c.name, got.Errno, got.Why, c.want)
		}
	}
	// The id survives into the error reply once the header is whole.
	if got := parseRequest(good[:len(good)-1], 0); got.ID != 9 {
		t.Errorf("id %d in the refusal of a truncated request, want 9", got.ID)
	}
}

// TestRequestFuzz feeds the parser random mutations of valid requests;
// it must refuse or accept each without crashing, and whatever it accepts
// must lie within the message.
func TestRequestFuzz(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	seeds := [][]byte{
		encode(t, Request{Type: ReqExec, ID: 1, Cwd: "/", Path: "/bin", Argv: []string{"a", "bb"}, Env: []string{"C=d"}}),
		encode(t, Request{Type: ReqSignal, ID: 2, Target: 1, Sig: 9}),
	}
	for i := 0; i < 20000; i++ {
		b := slices.Clone(seeds[rng.Intn(len(seeds))])
		for n := rng.Intn(4) + 1; n > 0; n-- {
			switch rng.Intn(4) {
			case 0:
				if len(b) > 0 {
					b[rng.Intn(len(b))] = byte(rng.Intn(256))
				}
			case 1:
				b = b[:rng.Intn(len(b)+1)]
			case 2:
				b = append(b, byte(rng.Intn(256)))
			case 3:
				if len(b) >= reqHeaderSize {
					off := 24 + 4*rng.Intn(6)
					binary.NativeEndian.PutUint32(b[off:], rng.Uint32())
				}
			}
		}
		got := parseRequest(b, rng.Intn(4))
		if got.Errno == 0 && got.Type == ReqExec {
			total := len(got.Cwd) + len(got.Path) + 2
			for _, s := range append(slices.Clone(got.Argv), got.Env...) {
				total += len(s) + 1
			}
			if total+reqHeaderSize != len(b) {
				t.Fatalf("accepted %x with strings of %d bytes", b, total)
			}
		}
	}
}

// TestRequestLimits: Encode refuses what the init would, with E2BIG.
func TestRequestLimits(t *testing.T) {
	big := strings.Repeat("x", ReqMax)
	if _, err := (&Request{Type: ReqExec, Argv: []string{big}}).Encode(); !errors.Is(err, unix.E2BIG) {
		t.Errorf("a request over ReqMax: %v, want E2BIG", err)
	}
	many := make([]string, ReqMaxStrings+1)
	if _, err := (&Request{Type: ReqExec, Argv: many}).Encode(); !errors.Is(err, unix.E2BIG) {
		t.Errorf("a request over ReqMaxStrings: %v, want E2BIG", err)
	}
	if _, err := (&Request{Type: ReqExec, Argv: []string{"a\x00b"}}).Encode(); err == nil {
		t.Error("a NUL inside a string was encoded")
	}
}

// TestServeCheck: the default profile lets a session's init serve, with
// pidfds; a profile denying one of its calls is named.
func TestServeCheck(t *testing.T) {
	if denied, pidfd := ServeCheck(compile(t, seccomp.DefaultProfile())); denied != "" || !pidfd {
		t.Errorf("the default profile: denied %q, pidfd %v; want none, true", denied, pidfd)
	}
	for _, name := range []string{"setsid", "close_range", "wait4", "recvmsg"} {
		if denied, _ := ServeCheck(compile(t, denying(name))); denied != name {
			t.Errorf("a profile denying %s: denied %q", name, denied)
		}
	}
	one := uint(1)
	noPidfd := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{
		Names: []string{"clone"}, Action: specs.ActErrno, ErrnoRet: &one,
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_PIDFD, ValueTwo: unix.CLONE_PIDFD, Op: specs.OpMaskedEqual}},
	}}}
	if denied, pidfd := ServeCheck(compile(t, noPidfd)); denied != "" || pidfd {
		t.Errorf("a profile denying CLONE_PIDFD: denied %q, pidfd %v; want none, false", denied, pidfd)
	}
}
