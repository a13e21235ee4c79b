package agentrun

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/agentrun/agentrun/internal/statedir"
	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Identity inside the sandbox when the caller is host root. The sandbox runs
// as uid/gid SandboxID, which maps to RootModeHostID on the host: an id no
// account or subordinate range uses, so a process that escaped every
// namespace would still own nothing on the host. Binds from the policy
// (workspace, --ro, --rw) are idmapped mounts that present their owner as
// SandboxID, so writes land on the host with the owner's ids.
const (
	SandboxID      = 1000
	RootModeHostID = 2147418112 // 0x7fff0000
)

// AnnotationSeccomp records on the Spec where Spec.Linux.Seccomp came
// from: "default", "unconfined" or "file:PATH". The other annotations and
// mount types of agentrun's own are the mounts package's.
const AnnotationSeccomp = "run.agentrun.seccomp"

// SeccompUnconfined is the Policy.Seccomp value that disables the filter.
const SeccompUnconfined = "unconfined"

// Limits on what /etc copies may put into the tmpfs root; bigger files are
// bound. A copy's cost grows with the file and a bind's does not: binding
// /etc/mime.types (72 KiB) and /etc/ld.so.cache (36 KiB) instead of
// copying them makes a spawn about 3 % cheaper (bench/README).
const (
	copyMaxFile  = 16 << 10
	copyMaxTotal = 512 << 10
	// A root template copies its files once per host state, so a bigger
	// file is worth a copy there: each bind is a mount per spawn.
	templateCopyMax = 256 << 10
)

// Default tmpfs caps.
const (
	defaultTmpSize    = 1 << 30
	defaultVarTmpSize = 256 << 20
	defaultShmSize    = 64 << 20
	defaultExtraTmpfs = 64 << 20
)

// HostInfo is what the compiler needs to know about the host. Run fills it
// from the real system; tests inject it.
type HostInfo struct {
	UID, GID int // caller's effective ids
	// Workspace is the resolved workspace directory and its owner.
	Workspace                  string
	WorkspaceUID, WorkspaceGID int
	Environ                    []string
	// Lstat and Readlink inspect host paths (system dirs, mount sources).
	Lstat    func(string) (fs.FileInfo, error)
	Readlink func(string) (string, error)
	// Resolve follows symlinks (for /etc entries that are links).
	Resolve func(string) (string, error)
	// Owner returns the uid/gid owning a host path (root mode idmaps).
	Owner func(string) (uid, gid int, err error)
	// ReadFile reads a policy-named file (a seccomp profile).
	ReadFile func(string) ([]byte, error)
	// StateRoots are agentrun's own state directories for this caller,
	// symlinks resolved: cached plans, express records, compiled filters,
	// cgroup records and root templates. A sandbox that could write there
	// could plant a plan that a later spawn runs, and one that could read
	// there would see other spawns' environments (plans hold them), so no
	// bind may hold one or lie in one.
	StateRoots []string
	// StateIDs are the identities of the state roots that exist, and
	// StateChain those of every directory from each root up to "/", each
	// with the root's path: the same directories reached by another path
	// (a bind mount of /run elsewhere on the host) are refused too. Empty
	// where the host gives no identities.
	StateIDs, StateChain map[FileID]string
}

// FileID is a file's device and inode number: a directory has the same one
// under every path that reaches it, a bind mount's included.
type FileID struct{ Dev, Ino uint64 }

// systemDirs are bound read-only (or recreated as symlinks when the host
// has them as symlinks, as on merged-/usr systems).
var systemDirs = [...]string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the only parts of /etc the sandbox sees: enough for users,
// name resolution, TLS trust and the dynamic linker, and nothing secret
// (/etc/ssl/private stays out: a caller in ssl-cert could read keys there).
var etcFiles = [...]string{
	"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf",
	"/etc/host.conf", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/localtime", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/alternatives",
	"/etc/mime.types", "/etc/protocols", "/etc/services", "/etc/gitconfig",
	"/etc/inputrc", "/etc/profile", "/etc/bash.bashrc", "/etc/python3", "/etc/python3.11",
}

// maskedPaths hide kernel interfaces in /proc (bind of /dev/null or an
// empty read-only tmpfs); readonlyPaths are remounted read-only.
var maskedPaths = [...]string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
	"/proc/timer_stats", "/proc/sysrq-trigger", "/proc/kmsg", "/proc/config.gz",
}

var readonlyPaths = [...]string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"}

// ErrPolicy marks invalid policies; the CLI reports them and exits 125.
var ErrPolicy = errors.New("policy")

func policyErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrPolicy, fmt.Sprintf(format, a...))
}

// rootMode reports whether the sandbox is created by host root, which
// selects the unprivileged RootModeHostID mapping and idmapped binds.
func (h *HostInfo) rootMode() bool { return h.UID == 0 }

// Compile turns a Policy into the OCI Spec that nsinit executes.
func Compile(p *Policy, h *HostInfo) (*specs.Spec, error) {
	if len(p.Command) == 0 {
		return nil, policyErr("no command given")
	}
	env, err := p.Environ(h.Environ)
	if err != nil {
		return nil, err
	}
	netMode := p.Network
	if netMode == "" {
		netMode = NetworkNone
	}
	if netMode != NetworkNone && netMode != NetworkHost {
		return nil, policyErr("network mode %q is not one of none, host", p.Network)
	}

	uid, gid := h.UID, h.GID
	hostUID, hostGID := h.UID, h.GID
	if h.rootMode() {
		uid, gid = SandboxID, SandboxID
		hostUID, hostGID = RootModeHostID, RootModeHostID
	}

	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: "agentrun",
		Process: &specs.Process{
			Args:            append([]string(nil), p.Command...),
			Env:             env,
			Cwd:             "/workspace",
			User:            specs.User{UID: uint32(uid), GID: uint32(gid)},
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
		},
		Annotations: map[string]string{mounts.AnnotationRootfs: "tmpfs"},
		Linux: &specs.Linux{
			UIDMappings:       []specs.LinuxIDMapping{{ContainerID: uint32(uid), HostID: uint32(hostUID), Size: 1}},
			GIDMappings:       []specs.LinuxIDMapping{{ContainerID: uint32(gid), HostID: uint32(hostGID), Size: 1}},
			RootfsPropagation: "private",
			MaskedPaths:       append([]string(nil), maskedPaths[:]...),
			ReadonlyPaths:     append([]string(nil), readonlyPaths[:]...),
			Devices:           defaultDevices(),
		},
	}
	s.Linux.Namespaces = []specs.LinuxNamespace{
		{Type: specs.UserNamespace}, {Type: specs.MountNamespace}, {Type: specs.PIDNamespace},
		{Type: specs.UTSNamespace}, {Type: specs.IPCNamespace}, {Type: specs.CgroupNamespace},
	}
	if netMode == NetworkNone {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	caps, err := normalizeCaps(p.CapAdd)
	if err != nil {
		return nil, err
	}
	if len(caps) > 0 {
		s.Process.Capabilities = &specs.LinuxCapabilities{
			Bounding: caps, Effective: caps, Permitted: caps, Inheritable: caps, Ambient: caps,
		}
	}
	if err := addRlimits(s.Process, &p.Limits); err != nil {
		return nil, err
	}
	addResources(s.Linux, &p.Limits)

	ms, templateCopies, err := systemMounts(h)
	if err != nil {
		return nil, err
	}
	if len(templateCopies) > 0 {
		s.Annotations[mounts.AnnotationTemplateCopies] = strings.Join(templateCopies, ",")
	}
	ws, err := userBind(h, h.Workspace, "/workspace", false)
	if err != nil {
		return nil, err
	}
	ms = append(ms, ws)
	extra, err := extraMounts(p.Mounts, h)
	if err != nil {
		return nil, err
	}
	s.Mounts = append(ms, extra...)
	if err := addSeccomp(s, p, h); err != nil {
		return nil, err
	}
	return s, nil
}

// addSeccomp sets the filter. Unconfined is refused where the filter is what
// keeps a privilege off the host: in root mode a writable bind owned by
// root is idmapped to the sandbox user, and only the filter stops it from
// leaving a root-owned setuid file there.
func addSeccomp(s *specs.Spec, p *Policy, h *HostInfo) error {
	switch p.Seccomp {
	case "":
		s.Linux.Seccomp = seccomp.DefaultProfile()
		s.Annotations[AnnotationSeccomp] = "default"
	case SeccompUnconfined:
		if h.rootMode() {
			for _, m := range s.Mounts {
				if len(m.UIDMappings) > 0 && m.UIDMappings[0].ContainerID == 0 && hasRW(m.Options) {
					return policyErr("--seccomp-profile unconfined with the root-owned writable bind %s as root would let the sandbox create root-owned setuid files; run as the owner or keep a profile", m.Source)
				}
			}
		}
		s.Annotations[AnnotationSeccomp] = SeccompUnconfined
	default:
		b, err := h.ReadFile(p.Seccomp)
		if err != nil {
			return policyErr("seccomp profile: %v", err)
		}
		prof, err := seccomp.ParseProfile(b)
		if err != nil {
			return policyErr("seccomp profile %s: %v", p.Seccomp, err)
		}
		s.Linux.Seccomp = prof
		s.Annotations[AnnotationSeccomp] = "file:" + p.Seccomp
	}
	return nil
}

func hasRW(opts []string) bool {
	for _, o := range opts {
		if o == "rw" {
			return true
		}
	}
	return false
}

func defaultDevices() []specs.LinuxDevice {
	dev := func(p string, major, minor int64) specs.LinuxDevice {
		mode := fs.FileMode(0o666)
		return specs.LinuxDevice{Path: p, Type: "c", Major: major, Minor: minor, FileMode: &mode}
	}
	return []specs.LinuxDevice{
		dev("/dev/null", 1, 3), dev("/dev/zero", 1, 5), dev("/dev/full", 1, 7),
		dev("/dev/random", 1, 8), dev("/dev/urandom", 1, 9), dev("/dev/tty", 5, 0),
	}
}

func addRlimits(proc *specs.Process, l *Limits) error {
	add := func(typ string, v uint64) {
		if v > 0 {
			proc.Rlimits = append(proc.Rlimits, specs.POSIXRlimit{Type: typ, Hard: v, Soft: v})
		}
	}
	add("RLIMIT_NOFILE", l.NoFile)
	add("RLIMIT_FSIZE", uint64(l.FSize))
	if l.CPUTime > 0 {
		secs := uint64((int64(l.CPUTime) + 999_999_999) / 1_000_000_000)
		add("RLIMIT_CPU", secs)
	}
	add("RLIMIT_NPROC", l.NProc)
	return nil
}

// addResources records cgroup limits; enforcement lives in cgroups/.
func addResources(lx *specs.Linux, l *Limits) {
	if l.Memory == 0 && l.Pids == 0 && l.CPUs == 0 {
		return
	}
	r := &specs.LinuxResources{}
	if l.Memory > 0 {
		m := int64(l.Memory)
		r.Memory = &specs.LinuxMemory{Limit: &m, Swap: &m}
	}
	if l.Pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: &l.Pids}
	}
	if l.CPUs > 0 {
		period := uint64(100_000)
		quota := int64(l.CPUs * float64(period))
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	lx.Resources = r
}

func tmpfs(dest string, size int64, mode string) specs.Mount {
	return specs.Mount{
		Destination: dest, Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "nodev", "mode=" + mode, "size=" + strconv.FormatInt(size, 10)},
	}
}

func roBind(src, dest string) specs.Mount {
	return specs.Mount{Destination: dest, Type: "bind", Source: src, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
}

// systemMounts is the fixed part of the root: system directories, selected
// /etc entries, /proc, a minimal /dev and the scratch tmpfs mounts, and the
// /etc binds a root template may copy (mounts.AnnotationTemplateCopies).
func systemMounts(h *HostInfo) ([]specs.Mount, []string, error) {
	var ms []specs.Mount
	var templateCopies []string
	for _, d := range systemDirs {
		fi, err := h.Lstat(d)
		if err != nil {
			continue // absent on this host (e.g. /lib32)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := h.Readlink(d)
			if err != nil {
				return nil, nil, fmt.Errorf("compile: readlink %s: %w", d, err)
			}
			ms = append(ms, specs.Mount{Destination: d, Type: mounts.TypeSymlink, Source: target})
			continue
		}
		if fi.IsDir() {
			ms = append(ms, roBind(d, d))
		}
	}
	copied := int64(0)
	for _, f := range etcFiles {
		fi, err := h.Lstat(f)
		if err != nil {
			continue
		}
		src := f
		if fi.Mode()&fs.ModeSymlink != 0 {
			// e.g. /etc/resolv.conf -> ../run/...: use what it points to so
			// the file exists without exposing /run.
			if src, err = h.Resolve(f); err != nil {
				continue // dangling: the host has no such file either
			}
			if fi, err = h.Lstat(src); err != nil {
				continue
			}
		}
		// Only files anyone may read: the init makes the copy, owned by the
		// sandbox user, so a file its owner or group alone may read would
		// become readable in the sandbox (or, where the init cannot read
		// it either, fail every spawn). A bind shows it as on the host.
		readable := fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0
		if readable && fi.Size() <= copyMaxFile && copied+fi.Size() <= copyMaxTotal {
			copied += fi.Size()
			ms = append(ms, specs.Mount{Destination: f, Type: mounts.TypeCopy, Source: src})
			continue
		}
		if readable && fi.Size() <= templateCopyMax {
			templateCopies = append(templateCopies, f)
		}
		ms = append(ms, roBind(src, f))
	}
	ms = append(ms,
		specs.Mount{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev", "noexec"}},
		specs.Mount{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "mode=755", "size=65536"}},
		specs.Mount{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		tmpfs("/dev/shm", defaultShmSize, "1777"),
		specs.Mount{Destination: "/dev/ptmx", Type: mounts.TypeSymlink, Source: "pts/ptmx"},
		specs.Mount{Destination: "/dev/fd", Type: mounts.TypeSymlink, Source: "/proc/self/fd"},
		specs.Mount{Destination: "/dev/stdin", Type: mounts.TypeSymlink, Source: "/proc/self/fd/0"},
		specs.Mount{Destination: "/dev/stdout", Type: mounts.TypeSymlink, Source: "/proc/self/fd/1"},
		specs.Mount{Destination: "/dev/stderr", Type: mounts.TypeSymlink, Source: "/proc/self/fd/2"},
		tmpfs("/tmp", defaultTmpSize, "1777"),
		tmpfs("/var/tmp", defaultVarTmpSize, "1777"),
	)
	return ms, templateCopies, nil
}

// userBind is a bind of a caller-chosen host path. As root it carries an
// idmap that presents the path's owner as the sandbox user.
func userBind(h *HostInfo, src, dest string, readonly bool) (specs.Mount, error) {
	if err := stateBindErr(h, src, dest); err != nil {
		return specs.Mount{}, err
	}
	opts := []string{"rbind", "rw", "nosuid", "nodev"}
	if readonly {
		opts[1] = "ro"
	}
	m := specs.Mount{Destination: dest, Type: "bind", Source: src, Options: opts}
	if h.rootMode() {
		ouid, ogid := h.WorkspaceUID, h.WorkspaceGID
		if src != h.Workspace {
			var err error
			if ouid, ogid, err = h.Owner(src); err != nil {
				return m, fmt.Errorf("compile: owner of %s: %w", src, err)
			}
		}
		m.UIDMappings = []specs.LinuxIDMapping{{ContainerID: uint32(ouid), HostID: RootModeHostID, Size: 1}}
		m.GIDMappings = []specs.LinuxIDMapping{{ContainerID: uint32(ogid), HostID: RootModeHostID, Size: 1}}
		m.Options = append(m.Options, "idmap")
	}
	return m, nil
}

// stateBindErr refuses a bind of src (at dest) that holds or lies in one
// of agentrun's state roots (HostInfo.StateRoots), by path and, where the
// host gives identities, by the identities of src and the directories
// above it (HostInfo.StateIDs, StateChain).
func stateBindErr(h *HostInfo, src, dest string) error {
	refuse := func(r string) error {
		return policyErr("a bind of %s at %s would give the sandbox agentrun's state in %s, whose cached plans "+
			"later spawns run and which hold other spawns' environments: bind a directory that neither holds it nor lies in it", src, dest, r)
	}
	for _, r := range h.StateRoots {
		if statedir.Within(src, r) || statedir.Within(r, src) {
			return refuse(r)
		}
	}
	if len(h.StateIDs)+len(h.StateChain) == 0 || h.Lstat == nil {
		return nil
	}
	resolved := path.Clean(src)
	if h.Resolve != nil {
		if t, err := h.Resolve(src); err == nil && path.IsAbs(t) {
			resolved = path.Clean(t)
		}
	}
	for p := resolved; ; p = path.Dir(p) {
		if fi, err := h.Lstat(p); err == nil {
			if id, ok := fileID(fi); ok {
				if r, in := h.StateIDs[id]; in {
					return refuse(r) // src is a state root or lies in one
				}
				if r, holds := h.StateChain[id]; holds && p == resolved {
					return refuse(r) // src is a directory above a state root
				}
			}
		}
		if p == path.Dir(p) {
			return nil
		}
	}
}

// reservedDests may not be replaced or shadowed by extra mounts.
var reservedDests = [...]string{"/", "/proc", "/dev", "/workspace", "/usr", "/etc"}

// ValidateDest checks a sandbox destination path: absolute, clean, no ".."
// and not one of the paths the runtime owns.
func ValidateDest(dest string) error {
	if !path.IsAbs(dest) {
		return policyErr("mount destination %q is not absolute", dest)
	}
	for _, part := range strings.Split(dest, "/") {
		if part == ".." {
			return policyErr("mount destination %q contains ..", dest)
		}
	}
	if path.Clean(dest) != dest {
		return policyErr("mount destination %q is not clean (want %q)", dest, path.Clean(dest))
	}
	for _, r := range reservedDests {
		if dest == r {
			return policyErr("mount destination %s is owned by the runtime", dest)
		}
	}
	if strings.HasPrefix(dest, "/proc/") || strings.HasPrefix(dest, "/dev/") {
		return policyErr("mount destination %s is under /proc or /dev", dest)
	}
	return nil
}

// checkSource requires an existing host path that is not itself a symlink.
func checkSource(h *HostInfo, src string) error {
	if !path.IsAbs(src) {
		return policyErr("mount source %q is not absolute", src)
	}
	fi, err := h.Lstat(src)
	if err != nil {
		return policyErr("mount source %s does not exist", src)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := h.Readlink(src)
		return policyErr("mount source %s is a symlink (to %s); name the real path", src, target)
	}
	return nil
}

func extraMounts(in []Mount, h *HostInfo) ([]specs.Mount, error) {
	seen := map[string]bool{}
	var out []specs.Mount
	for _, m := range in {
		if err := ValidateDest(m.Dest); err != nil {
			return nil, err
		}
		if seen[m.Dest] {
			return nil, policyErr("mount destination %s given twice", m.Dest)
		}
		seen[m.Dest] = true
		switch m.Mode {
		case MountTmpfs:
			if m.Source != "" {
				return nil, policyErr("tmpfs mount at %s takes no source", m.Dest)
			}
			size := int64(m.Size)
			if size == 0 {
				size = defaultExtraTmpfs
			}
			out = append(out, tmpfs(m.Dest, size, "1777"))
		case MountRO, MountRW:
			if err := checkSource(h, m.Source); err != nil {
				return nil, err
			}
			b, err := userBind(h, m.Source, m.Dest, m.Mode == MountRO)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		default:
			return nil, policyErr("mount mode %q at %s is not one of ro, rw, tmpfs", m.Mode, m.Dest)
		}
	}
	// Parents before children so a mount at /a/b lands inside /a.
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].Destination, "/") < strings.Count(out[j].Destination, "/")
	})
	return out, nil
}
