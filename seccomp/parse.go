package seccomp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ParseOptions say which conditional rules of a Docker-format profile apply.
// OCI profiles have no conditions and ignore them.
type ParseOptions struct {
	// Arch is the GOARCH name ("amd64", "arm64") that archMap entries and
	// includes/excludes "arches" are matched against. Empty means the
	// architecture this program runs on.
	Arch string
	// Caps are the capabilities the sandboxed command will hold ("CAP_"
	// prefix optional). A rule with includes.caps applies only if all of
	// them are held; excludes.caps drops it if any is. agentrun's default is
	// no capabilities.
	Caps []string
	// Kernel is the kernel release ("6.1.0-18-amd64") that minKernel
	// conditions are compared with. Empty means the running kernel.
	Kernel string
}

// ParseProfile reads a seccomp profile in any of the accepted JSON forms:
// an OCI linux.seccomp object, a whole OCI config.json (its linux.seccomp is
// taken), or a Docker profile (archMap, name/names, includes/excludes,
// comment). Docker conditions are resolved for the running architecture and
// kernel and a command without capabilities; use ParseProfileWith to change
// that. Unknown fields, unknown actions, operators, architectures or flags,
// and trailing data are errors (*ProfileError), never ignored.
func ParseProfile(data []byte) (*specs.LinuxSeccomp, error) {
	return ParseProfileWith(data, ParseOptions{})
}

// ParseProfileWith is ParseProfile with explicit conditions for Docker rules.
func ParseProfileWith(data []byte, opts ParseOptions) (*specs.LinuxSeccomp, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, profileErr("", "empty document")
	}
	data, err := unwrapOCIConfig(data)
	if err != nil {
		return nil, err
	}
	var dp dockerProfile
	if err := decodeStrict(data, &dp); err != nil {
		return nil, err
	}
	if opts.Arch == "" {
		opts.Arch = runtime.GOARCH
	}
	if opts.Kernel == "" {
		opts.Kernel = kernelRelease()
	}
	p, err := dp.resolve(opts)
	if err != nil {
		return nil, err
	}
	if err := Validate(p); err != nil {
		return nil, err
	}
	return p, nil
}

// dockerProfile is a superset of the OCI and Docker profile formats, so one
// strict decode serves both.
type dockerProfile struct {
	DefaultAction    specs.LinuxSeccompAction `json:"defaultAction"`
	DefaultErrnoRet  *uint                    `json:"defaultErrnoRet"`
	Architectures    []specs.Arch             `json:"architectures"`
	ArchMap          []dockerArch             `json:"archMap"`
	Flags            []specs.LinuxSeccompFlag `json:"flags"`
	ListenerPath     string                   `json:"listenerPath"`
	ListenerMetadata string                   `json:"listenerMetadata"`
	Syscalls         []dockerSyscall          `json:"syscalls"`
}

type dockerArch struct {
	Arch      specs.Arch   `json:"architecture"`
	SubArches []specs.Arch `json:"subArchitectures"`
}

type dockerSyscall struct {
	Names    []string                 `json:"names"`
	Name     string                   `json:"name"`
	Action   specs.LinuxSeccompAction `json:"action"`
	ErrnoRet *uint                    `json:"errnoRet"`
	Args     []specs.LinuxSeccompArg  `json:"args"`
	Comment  string                   `json:"comment"`
	Includes *dockerFilter            `json:"includes"`
	Excludes *dockerFilter            `json:"excludes"`
}

type dockerFilter struct {
	Caps      []string `json:"caps"`
	Arches    []string `json:"arches"`
	MinKernel string   `json:"minKernel"`
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &ProfileError{Msg: "malformed JSON", Err: err}
	}
	if dec.More() {
		return profileErr("", "trailing data after the JSON object")
	}
	return nil
}

// unwrapOCIConfig returns linux.seccomp when data is a whole OCI config.
func unwrapOCIConfig(data []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	// Only the first value matters here; decodeStrict reports trailing data.
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&top); err != nil {
		return nil, &ProfileError{Msg: "malformed JSON", Err: err}
	}
	if _, ok := top["defaultAction"]; ok {
		return data, nil
	}
	_, hasLinux := top["linux"]
	_, hasVersion := top["ociVersion"]
	if !hasLinux && !hasVersion {
		return data, nil // not a config; the strict decode reports what is wrong
	}
	var cfg struct {
		Linux *struct {
			Seccomp json.RawMessage `json:"seccomp"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, &ProfileError{Field: "linux", Msg: "malformed OCI config", Err: err}
	}
	if cfg.Linux == nil || len(cfg.Linux.Seccomp) == 0 || string(cfg.Linux.Seccomp) == "null" {
		return nil, profileErr("linux.seccomp", "the OCI config has no seccomp profile")
	}
	return cfg.Linux.Seccomp, nil
}

func (dp *dockerProfile) resolve(opts ParseOptions) (*specs.LinuxSeccomp, error) {
	p := &specs.LinuxSeccomp{
		DefaultAction:    dp.DefaultAction,
		DefaultErrnoRet:  dp.DefaultErrnoRet,
		Architectures:    dp.Architectures,
		Flags:            dp.Flags,
		ListenerPath:     dp.ListenerPath,
		ListenerMetadata: dp.ListenerMetadata,
	}
	if len(dp.ArchMap) > 0 {
		if len(dp.Architectures) > 0 {
			return nil, profileErr("archMap", "both architectures and archMap are set; use one")
		}
		native := scmpArchForGOARCH(opts.Arch)
		for i, am := range dp.ArchMap {
			if !knownArch(am.Arch) {
				return nil, profileErr(fmt.Sprintf("archMap[%d].architecture", i), "unknown architecture %q", am.Arch)
			}
			if am.Arch == native {
				p.Architectures = append(append([]specs.Arch{am.Arch}, am.SubArches...), p.Architectures...)
			}
		}
	}
	caps := make(map[string]bool, len(opts.Caps))
	for _, c := range opts.Caps {
		caps[normalizeCap(c)] = true
	}
	for i, ds := range dp.Syscalls {
		field := fmt.Sprintf("syscalls[%d]", i)
		names := ds.Names
		if ds.Name != "" {
			if len(ds.Names) > 0 {
				return nil, profileErr(field, "both name and names are set; use one")
			}
			names = []string{ds.Name}
		}
		apply, err := applies(field, ds.Includes, ds.Excludes, opts, caps)
		if err != nil {
			return nil, err
		}
		if !apply {
			continue
		}
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Names:    names,
			Action:   ds.Action,
			ErrnoRet: ds.ErrnoRet,
			Args:     ds.Args,
		})
	}
	return p, nil
}

// applies evaluates Docker's includes (every condition must hold) and
// excludes (any condition drops the rule).
func applies(field string, inc, exc *dockerFilter, opts ParseOptions, caps map[string]bool) (bool, error) {
	if inc != nil {
		if len(inc.Arches) > 0 && !contains(inc.Arches, opts.Arch) {
			return false, nil
		}
		for _, c := range inc.Caps {
			if !caps[normalizeCap(c)] {
				return false, nil
			}
		}
		if inc.MinKernel != "" {
			ok, err := kernelAtLeast(opts.Kernel, inc.MinKernel)
			if err != nil {
				return false, profileErr(field+".includes.minKernel", "%v", err)
			}
			if !ok {
				return false, nil
			}
		}
	}
	if exc != nil {
		if contains(exc.Arches, opts.Arch) {
			return false, nil
		}
		for _, c := range exc.Caps {
			if caps[normalizeCap(c)] {
				return false, nil
			}
		}
		if exc.MinKernel != "" {
			ok, err := kernelAtLeast(opts.Kernel, exc.MinKernel)
			if err != nil {
				return false, profileErr(field+".excludes.minKernel", "%v", err)
			}
			if ok {
				return false, nil
			}
		}
	}
	return true, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func normalizeCap(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// scmpArchForGOARCH maps a GOARCH name to the architecture Docker's archMap
// is keyed by.
func scmpArchForGOARCH(goarch string) specs.Arch {
	switch goarch {
	case "amd64":
		return specs.ArchX86_64
	case "arm64":
		return specs.ArchAARCH64
	case "386":
		return specs.ArchX86
	case "arm":
		return specs.ArchARM
	case "ppc64":
		return specs.ArchPPC64
	case "ppc64le":
		return specs.ArchPPC64LE
	case "s390x":
		return specs.ArchS390X
	case "riscv64":
		return specs.ArchRISCV64
	case "loong64":
		return specs.ArchLOONGARCH64
	case "mips":
		return specs.ArchMIPS
	case "mipsle":
		return specs.ArchMIPSEL
	case "mips64":
		return specs.ArchMIPS64
	case "mips64le":
		return specs.ArchMIPSEL64
	}
	return ""
}

// kernelAtLeast reports whether release ("6.1.0-18-amd64") is at least min
// ("4.8"). An unknown release counts as new enough: conditions on the kernel
// only matter where the kernel is known.
func kernelAtLeast(release, min string) (bool, error) {
	wantMaj, wantMin, ok := parseKernelVersion(min)
	if !ok {
		return false, fmt.Errorf("%q is not a kernel version like \"5.10\"", min)
	}
	maj, mnr, ok := parseKernelVersion(release)
	if !ok {
		return true, nil
	}
	return maj > wantMaj || (maj == wantMaj && mnr >= wantMin), nil
}

func parseKernelVersion(s string) (major, minor int, ok bool) {
	end := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end >= 0 {
		s = s[:end]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}
