//go:build linux && cgo

package seccomp

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

func TestCompileDefault(t *testing.T) {
	prog := mustCompile(t, DefaultProfile())
	n := len(prog.Filter) / sockFilterSize
	if len(prog.Filter)%sockFilterSize != 0 || n == 0 || n > maxInstructions {
		t.Fatalf("program of %d bytes", len(prog.Filter))
	}
	if prog.Flags != 0 || prog.NeedsListener() {
		t.Errorf("flags %#x, want none", prog.Flags)
	}
	if prog.Hash != ProfileHash(DefaultProfile()) {
		t.Error("program hash is not the profile hash")
	}
	t.Logf("default profile: %d instructions; skipped (unknown to this libseccomp): %v", n, prog.Skipped)
	for _, s := range prog.Skipped {
		for _, core := range []string{"read", "execve", "clone", "socket", "ioctl", "keyctl", "mount", "openat"} {
			if s == core {
				t.Errorf("core syscall %s skipped", s)
			}
		}
	}

	nprog := mustCompile(t, mustNotify(t, DefaultProfile()))
	if !nprog.NeedsListener() {
		t.Error("notify program does not need a listener")
	}
	for _, name := range []string{"keyctl", "unshare", "clone", "socket", "ioctl", "mount", "bpf"} {
		found := false
		for _, v := range nprog.names {
			found = found || v == name
		}
		if !found {
			t.Errorf("notifier cannot name %s", name)
		}
	}
	if got := nprog.syscallName(0xc000003e, 250); got == "" {
		t.Error("no fallback name")
	}
}

func TestCompileFlags(t *testing.T) {
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow,
		Flags:    []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog, specs.LinuxSeccompFlagSpecAllow, specs.LinuxSeccompFlagWaitKillableRecv},
		Syscalls: []specs.LinuxSyscall{{Names: []string{"keyctl"}, Action: specs.ActNotify}}}
	prog := mustCompile(t, p)
	if want := FlagLog | FlagSpecAllow | FlagWaitKillableRecv | FlagNewListener; prog.Flags != want {
		t.Errorf("flags %#x, want %#x", prog.Flags, want)
	}
	p.DefaultAction = specs.ActNotify
	if prog := mustCompile(t, p); !prog.NeedsListener() || len(prog.names) < 300 {
		t.Errorf("notifying default: flags %#x, %d names", prog.Flags, len(prog.names))
	}
	// WAIT_KILLABLE_RECV without anything to notify: the kernel would refuse it.
	var pe *ProfileError
	if _, err := Compile(&specs.LinuxSeccomp{DefaultAction: specs.ActAllow,
		Flags: []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagWaitKillableRecv}}); !errors.As(err, &pe) {
		t.Errorf("WAIT_KILLABLE_RECV without notify: %v", err)
	}
}

func TestCompileSkipsUnknownNames(t *testing.T) {
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"getpid", "no_such_call", "no_such_call"}, Action: specs.ActErrno},
	}}
	prog := mustCompile(t, p)
	if len(prog.Skipped) != 1 || prog.Skipped[0] != "no_such_call" {
		t.Errorf("skipped %v", prog.Skipped)
	}
}

func TestCompileArchitectures(t *testing.T) {
	// Not the default profile: on i386 libseccomp maps socket rules onto
	// the socketcall multiplexer, where argument rules collide (EEXIST).
	prog := func(arches ...specs.Arch) []byte {
		p := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: arches,
			Syscalls: []specs.LinuxSyscall{{Names: []string{"keyctl", "bpf"}, Action: specs.ActErrno}}}
		return mustCompile(t, p).Filter
	}
	native := prog()
	// A foreign architecture adds nothing: the kernel can never present it.
	foreign, compat := specs.ArchAARCH64, specs.ArchX86
	compatScmp, compatAudit := libseccomp.ArchX86, uint32(0x40000003)
	if strings.Contains(string(scmpArchForGOARCH(runtime.GOARCH)), "AARCH64") {
		foreign, compat = specs.ArchX86_64, specs.ArchARM
		compatScmp, compatAudit = libseccomp.ArchARM, 0x40000028
	}
	if got := prog(foreign); !bytes.Equal(got, native) {
		t.Errorf("foreign architecture changed the program: %d vs %d bytes", len(got), len(native))
	}
	// A compat architecture is added: its keyctl gets the rule's EPERM,
	// where the native-only program kills a task of that architecture.
	nr, err := libseccomp.GetSyscallFromNameByArch("keyctl", compatScmp)
	if err != nil {
		t.Fatal(err)
	}
	in := &filterInput{nr: uint32(nr), arch: compatAudit}
	if ret, ok := run(prog(compat), in); !ok || ret != retErrno|uint32(errnoEPERM) {
		t.Errorf("compat architecture %s: keyctl returns %#x (%v), want EPERM", compat, ret, ok)
	}
	if ret, ok := run(native, in); !ok || ret != retKillProcess {
		t.Errorf("native only: a %s keyctl returns %#x (%v), want kill", compat, ret, ok)
	}
}

func TestCompileErrors(t *testing.T) {
	var pe *ProfileError
	if _, err := Compile(&specs.LinuxSeccomp{DefaultAction: "SCMP_ACT_NOPE"}); !errors.As(err, &pe) {
		t.Errorf("unknown action: %v", err)
	}
	if _, err := Compile(nil); !errors.As(err, &pe) {
		t.Errorf("nil profile: %v", err)
	}
	var c Cache
	if _, err := c.Compile(&specs.LinuxSeccomp{}); !errors.As(err, &pe) || c.Len() != 0 {
		t.Errorf("cache: %v (len %d)", err, c.Len())
	}
}

func TestCache(t *testing.T) {
	var c Cache
	a := mustNoErr(t)(c.Compile(DefaultProfile()))
	b := mustNoErr(t)(c.Compile(DefaultProfile()))
	if a != b || c.Len() != 1 {
		t.Fatalf("second compile of an equal profile missed the cache")
	}
	n := mustNoErr(t)(c.Compile(mustNotify(t, DefaultProfile())))
	if n == a || c.Len() != 2 {
		t.Fatalf("different profile hit the cache")
	}

	small := Cache{Max: 1}
	x := mustNoErr(t)(small.Compile(DefaultProfile()))
	mustNoErr(t)(small.Compile(mustNotify(t, DefaultProfile())))
	if small.Len() != 1 {
		t.Fatalf("cache grew past Max: %d", small.Len())
	}
	if y := mustNoErr(t)(small.Compile(DefaultProfile())); y == x {
		t.Fatal("evicted program was still returned")
	}

	// Concurrent identical misses compile once.
	var cc Cache
	var wg sync.WaitGroup
	progs := make([]*Program, 8)
	for i := range progs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			progs[i], _ = cc.Compile(DefaultProfile())
		}()
	}
	wg.Wait()
	for _, p := range progs {
		if p == nil || p != progs[0] {
			t.Fatal("concurrent compiles returned different programs")
		}
	}
}

func mustNoErr(t *testing.T) func(*Program, error) *Program {
	return func(p *Program, err error) *Program {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// A Docker-format profile loads and its rules take effect.
func TestDockerProfileTakesEffect(t *testing.T) {
	const doc = `{
		"defaultAction": "SCMP_ACT_ALLOW",
		"archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]},
		            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]}],
		"syscalls": [
			{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13, "comment": "no new directories"},
			{"name": "symlinkat", "action": "SCMP_ACT_ERRNO", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
			{"names": ["linkat", "link"], "action": "SCMP_ACT_ERRNO", "excludes": {"caps": ["CAP_SYS_ADMIN"]}}
		]
	}`
	p, err := ParseProfile([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	prog := mustCompile(t, p)
	cmd := childCmd(t, "spawn", prog, prog.Flags, "/bin/sh", "-c",
		`touch f; mkdir d 2>&1; ln -s f s && echo symlink ok; ln f h 2>&1; true`)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "Permission denied") || !strings.Contains(s, "symlink ok") || !strings.Contains(s, "Operation not permitted") {
		t.Fatalf("rules did not take effect as written:\n%s", s)
	}
}

// TestRealDockerProfile compiles and runs Docker's own default profile when
// one is available: AGENTRUN_DOCKER_PROFILE, or containers-common's copy.
func TestRealDockerProfile(t *testing.T) {
	path := os.Getenv("AGENTRUN_DOCKER_PROFILE")
	if path == "" {
		path = "/usr/share/containers/seccomp.json"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("no Docker profile (%v); set AGENTRUN_DOCKER_PROFILE", err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		t.Fatal(err)
	}
	prog := mustCompile(t, p)
	t.Logf("%s: %d rules, %d instructions, architectures %v, skipped %v", path, len(p.Syscalls), len(prog.Filter)/8, p.Architectures, prog.Skipped)
	out, err := childCmd(t, "probes", prog, prog.Flags).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := results(out)
	for name, want := range map[string]string{
		"keyctl": "EPERM", "socket(AF_VSOCK)": "EPERM", "clone3": "ENOSYS", "getpid": "0",
		"unshare(CLONE_NEWUSER)": "EPERM", "clone(CLONE_NEWUSER)": "EPERM", "personality(READ_IMPLIES_EXEC)": "EPERM",
	} {
		if got[name] != want {
			t.Errorf("%s = %q under Docker's profile, want %s", name, got[name], want)
		}
	}
	out, err = childCmd(t, "spawn", prog, prog.Flags, "/bin/sh", "-c", "echo docker ok").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "docker ok") {
		t.Fatalf("shell under Docker's profile: %v %s", err, out)
	}
	// With reports: the EPERM default notifies, seccomp keeps its guard.
	np := mustNotify(t, p)
	if np.DefaultAction != specs.ActNotify || !mustCompile(t, np).NeedsListener() {
		t.Fatalf("NotifyOnDeny(Docker profile): default %s", np.DefaultAction)
	}
}

func BenchmarkDefaultProfile(b *testing.B) {
	for b.Loop() {
		DefaultProfile()
	}
}

func BenchmarkProfileHash(b *testing.B) {
	p := DefaultProfile()
	for b.Loop() {
		ProfileHash(p)
	}
}

// First compile: what a spawn pays without a cache.
func BenchmarkCompileDefault(b *testing.B) {
	p := DefaultProfile()
	for b.Loop() {
		if _, err := Compile(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileDefaultNotify(b *testing.B) {
	p, err := NotifyOnDeny(DefaultProfile())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Compile(p); err != nil {
			b.Fatal(err)
		}
	}
}

// Cached: what a spawn pays with a warm Cache (hash and lookup).
func BenchmarkCompileCached(b *testing.B) {
	var c Cache
	p := DefaultProfile()
	if _, err := c.Compile(p); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Compile(p); err != nil {
			b.Fatal(err)
		}
	}
}
