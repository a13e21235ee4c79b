package seccomp

import (
	"errors"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func asProfileError(err error, pe **ProfileError) bool { return errors.As(err, pe) }

func TestParseOCI(t *testing.T) {
	const doc = `{
		"defaultAction": "SCMP_ACT_ERRNO",
		"defaultErrnoRet": 38,
		"architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
		"flags": ["SECCOMP_FILTER_FLAG_LOG"],
		"syscalls": [
			{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
			{"names": ["keyctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
			{"names": ["clone"], "action": "SCMP_ACT_ALLOW",
			 "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}
		]
	}`
	p, err := ParseProfile([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != specs.ActErrno || *p.DefaultErrnoRet != 38 || len(p.Architectures) != 2 ||
		len(p.Syscalls) != 3 || p.Syscalls[2].Args[0].Value != 2114060288 || p.Flags[0] != specs.LinuxSeccompFlagLog {
		t.Fatalf("parsed %+v", p)
	}

	// the same inside a whole OCI config
	cfg := `{"ociVersion": "1.2.0", "process": {"args": ["sh"]}, "linux": {"seccomp": ` + doc + `}}`
	q, err := ParseProfile([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if ProfileHash(p) != ProfileHash(q) {
		t.Fatal("config.json form parsed differently")
	}
}

func TestParseDocker(t *testing.T) {
	const doc = `{
		"defaultAction": "SCMP_ACT_ERRNO",
		"defaultErrnoRet": 1,
		"archMap": [
			{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
			{"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
			{"architecture": "SCMP_ARCH_RISCV64", "subArchitectures": null}
		],
		"syscalls": [
			{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW", "comment": "basics"},
			{"name": "getpid", "action": "SCMP_ACT_ALLOW"},
			{"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}},
			{"names": ["newcall"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "99.0"}},
			{"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
			{"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64", "x32"]}},
			{"names": ["clone"], "action": "SCMP_ACT_ALLOW",
			 "args": [{"index": 0, "value": 2114060288, "op": "SCMP_CMP_MASKED_EQ"}],
			 "excludes": {"caps": ["CAP_SYS_ADMIN"], "arches": ["s390", "s390x"]}},
			{"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38, "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
			{"names": ["oldcall"], "action": "SCMP_ACT_ALLOW", "excludes": {"minKernel": "5.0"}}
		]
	}`
	names := func(p *specs.LinuxSeccomp) map[string]bool {
		m := map[string]bool{}
		for _, sc := range p.Syscalls {
			for _, n := range sc.Names {
				m[n] = true
			}
		}
		return m
	}

	p, err := ParseProfileWith([]byte(doc), ParseOptions{Arch: "amd64", Kernel: "6.1.0-18-amd64"})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Architectures; len(got) != 3 || got[0] != specs.ArchX86_64 || got[1] != specs.ArchX86 || got[2] != specs.ArchX32 {
		t.Errorf("amd64 architectures = %v", got)
	}
	got := names(p)
	for n, want := range map[string]bool{
		"read": true, "getpid": true, "ptrace": true, "newcall": false, "mount": false,
		"arch_prctl": true, "clone": true, "clone3": true, "oldcall": false,
	} {
		if got[n] != want {
			t.Errorf("amd64, no caps: %s present = %v, want %v", n, got[n], want)
		}
	}

	p, err = ParseProfileWith([]byte(doc), ParseOptions{Arch: "arm64", Kernel: "4.19.0", Caps: []string{"sys_admin"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Architectures; len(got) != 2 || got[0] != specs.ArchAARCH64 || got[1] != specs.ArchARM {
		t.Errorf("arm64 architectures = %v", got)
	}
	got = names(p)
	for n, want := range map[string]bool{
		"ptrace": true, "mount": true, "arch_prctl": false, "clone": false, "clone3": false, "oldcall": true,
	} {
		if got[n] != want {
			t.Errorf("arm64, CAP_SYS_ADMIN, 4.19: %s present = %v, want %v", n, got[n], want)
		}
	}

	// An architecture absent from archMap leaves only the native one.
	p, err = ParseProfileWith([]byte(doc), ParseOptions{Arch: "ppc64le"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Architectures) != 0 {
		t.Errorf("ppc64le architectures = %v", p.Architectures)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"empty", ``, "empty document"},
		{"not json", `defaultAction: SCMP_ACT_ALLOW`, "malformed JSON"},
		{"truncated", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [`, "malformed JSON"},
		{"trailing", `{"defaultAction": "SCMP_ACT_ALLOW"} {}`, "trailing data"},
		{"unknown field", `{"defualtAction": "SCMP_ACT_ALLOW"}`, `unknown field "defualtAction"`},
		{"unknown syscall field", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "arg": []}]}`, `unknown field "arg"`},
		{"no default", `{"syscalls": []}`, "defaultAction: missing"},
		{"unknown default", `{"defaultAction": "SCMP_ACT_MAYBE"}`, `defaultAction: unknown action "SCMP_ACT_MAYBE"`},
		{"unknown action", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "ALLOW"}]}`, `syscalls[0].action: unknown action "ALLOW"`},
		{"missing action", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"]}]}`, `syscalls[0].action: missing`},
		{"no names", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"action": "SCMP_ACT_ERRNO"}]}`, "syscalls[0].names: empty"},
		{"empty name", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": [""], "action": "SCMP_ACT_ERRNO"}]}`, "empty syscall name"},
		{"name and names", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"name": "a", "names": ["b"], "action": "SCMP_ACT_ERRNO"}]}`, "both name and names"},
		{"bad op", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_SORTA"}]}]}`, `unknown operator "SCMP_CMP_SORTA"`},
		{"bad index", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}]}`, "args[0].index: 6 is out of range"},
		{"negative value", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": -1, "op": "SCMP_CMP_EQ"}]}]}`, "malformed JSON"},
		{"errno on allow", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "errnoRet": 1}]}`, "errnoRet: set, but action SCMP_ACT_ALLOW"},
		{"errno range", `{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 5000}`, "defaultErrnoRet: 5000 is out of range"},
		{"bad arch", `{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_Z80"]}`, `architectures[0]: unknown architecture "SCMP_ARCH_Z80"`},
		{"bad flag", `{"defaultAction": "SCMP_ACT_ALLOW", "flags": ["SECCOMP_FILTER_FLAG_FAST"]}`, `flags[0]: unknown flag`},
		{"arch and archMap", `{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86"], "archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}`, "both architectures and archMap"},
		{"bad archMap", `{"defaultAction": "SCMP_ACT_ALLOW", "archMap": [{"architecture": "x86_64"}]}`, `archMap[0].architecture: unknown architecture`},
		{"bad minKernel", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "new"}}]}`, `includes.minKernel: "new" is not a kernel version`},
		{"config without seccomp", `{"ociVersion": "1.2.0", "linux": {"namespaces": []}}`, "linux.seccomp: the OCI config has no seccomp profile"},
		{"array", `[1, 2]`, "malformed JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseProfile([]byte(c.doc))
			if err == nil {
				t.Fatal("parsed without error")
			}
			var pe *ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T (%v) is not a *ProfileError", err, err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "seccomp: invalid profile") {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, c := range []struct {
		release, min string
		want         bool
	}{
		{"6.18.44-fc-v595", "4.8", true},
		{"4.8.0", "4.8", true},
		{"4.7.10", "4.8", false},
		{"5.0", "4.19", true},
		{"4.19.0-1-amd64", "5.0", false},
		{"", "5.0", true}, // unknown kernel: conditions hold
	} {
		got, err := kernelAtLeast(c.release, c.min)
		if err != nil || got != c.want {
			t.Errorf("kernelAtLeast(%q, %q) = %v, %v; want %v", c.release, c.min, got, err, c.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   [6]uint64
		detail string
	}{
		{"clone", [6]uint64{cloneNewUser | cloneNewNS | 0x11}, "flags=CLONE_NEWNS|CLONE_NEWUSER"},
		{"unshare", [6]uint64{cloneNewUser}, "flags=CLONE_NEWUSER"},
		{"unshare", [6]uint64{cloneNewTime}, "flags=CLONE_NEWTIME"},
		{"setns", [6]uint64{3, cloneNewNet}, "nstype=CLONE_NEWNET"},
		{"socket", [6]uint64{17, 3, 0}, "family=AF_PACKET"},
		{"socket", [6]uint64{afNetlink, 3, 9}, "family=AF_NETLINK protocol=NETLINK_AUDIT"},
		{"socket", [6]uint64{99, 1, 0}, "family=99"},
		{"ioctl", [6]uint64{0, 0xffffffff00000000 | ioctlTIOCSTI}, "request=TIOCSTI"},
		{"personality", [6]uint64{0x400000}, "persona=0x400000"},
		{"seccomp", [6]uint64{1, filterNewListener}, "flags=SECCOMP_FILTER_FLAG_NEW_LISTENER"},
		{"keyctl", [6]uint64{}, ""},
	} {
		d, s := describe(c.name, c.args)
		if d != c.detail || s == "" {
			t.Errorf("describe(%s, %x) = %q, %q; want detail %q and a suggestion", c.name, c.args[:3], d, s, c.detail)
		}
	}
}
