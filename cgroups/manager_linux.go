//go:build linux

package cgroups

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/procid"
	"github.com/agentrun/agentrun/internal/sdbus"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// DefaultParent is the name of agentrun's parent cgroup.
const DefaultParent = "agentrun"

// callerLeaf is where a rootless caller's own processes are moved when its
// delegated v2 cgroup must become an inner node (see evacuate).
const callerLeaf = "agentrun-caller"

// v2Wanted are the v2 controllers enabled for a sandbox when available.
func v2Wanted() [3]string { return [...]string{Memory, Pids, CPU} }

// Options configure a Manager. The zero value is the production setup.
type Options struct {
	// StateDir holds one record per live cgroup Create made, for Sweep
	// (the express path's cgroups have none: their names are their
	// records). Default:
	// /run/agentrun/cgroups for root; $XDG_RUNTIME_DIR/agentrun/cgroups
	// rootless, or /tmp/agentrun-$UID/cgroups when XDG_RUNTIME_DIR is unset
	// or not private to the caller.
	StateDir string
	// Parent names agentrun's parent cgroup. Default DefaultParent.
	Parent string
	// Logger receives notes about skipped optional controllers and moved
	// processes. Default: discarded.
	Logger *slog.Logger
	// SystemdTimeout bounds the systemd user manager's answer to each
	// request about a transient scope (see DefaultSystemdTimeout, the
	// default).
	SystemdTimeout time.Duration
	// ScopeHolder makes the command that keeps a transient scope
	// populated (rootless v2 without delegation): it must block until its
	// stdin reaches EOF, e.g. nsinit.HoldCommand. Without it no scope is
	// made and such callers get the fail-closed error.
	ScopeHolder func() *exec.Cmd
	// LimitsOnly makes a cgroup v1 sandbox join only the hierarchies whose
	// controllers enforce its limits. By default it joins every usable
	// one: cpuacct and memory for Stats, freezer for Kill. Each hierarchy
	// costs a mkdir and an rmdir per sandbox (with its parent, when no
	// other sandbox runs); a caller that reads no usage and kills through
	// a PID namespace pays for none of that. Stats then reports what the
	// joined hierarchies count, and Kill signals without freezing. No
	// effect on cgroup v2, which is one hierarchy, or without limits.
	LimitsOnly bool
}

// Manager creates sandbox cgroups on this host for this caller. It detects
// the layout once and is immutable afterwards, but for the connection to
// the systemd user manager that its goroutines share.
type Manager struct {
	lay      layout
	euid     int
	parent   string
	stateDir string
	// pcHash is FNV-1a 64 (hex) of the /proc/self/cgroup that lay was
	// derived from: the express path's "C" fingerprint must be the read
	// the decisions were made on, not a later one.
	pcHash string
	log    *slog.Logger
	self   owner
	// sdEndpoints are where the caller's systemd user manager may listen
	// (rootless only), for transient scopes; sd is the connection all
	// goroutines share (opened on first use); sdTimeout bounds each
	// request.
	sdEndpoints []sdbus.Endpoint
	sd          *sdbus.Client
	sdTimeout   time.Duration
	holder      func() *exec.Cmd
	limitsOnly  bool
}

// owner identifies a runtime process across pid reuse.
type owner struct {
	pid   int
	start uint64 // /proc/<pid>/stat starttime
	pidns uint64 // inode of /proc/<pid>/ns/pid: pids are only comparable within one
}

// NewManager detects the cgroup layout as seen by the calling process.
// It creates nothing.
func NewManager(opts Options) (*Manager, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	lay, err := detectLayout(mi, pc)
	if err != nil {
		return nil, err
	}
	self, err := ownerOf(os.Getpid())
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write(pc)
	m := &Manager{
		lay:      lay,
		pcHash:   fmt.Sprintf("%016x", h.Sum64()),
		euid:     os.Geteuid(),
		parent:   opts.Parent,
		stateDir: opts.StateDir,
		log:      opts.Logger,
		self:     self,
	}
	if m.parent == "" {
		m.parent = DefaultParent
	}
	if err := validID(m.parent); err != nil {
		return nil, fmt.Errorf("cgroups: parent name: %w", err)
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.stateDir == "" {
		m.stateDir = defaultStateDir(m.euid)
	}
	m.holder = opts.ScopeHolder
	m.limitsOnly = opts.LimitsOnly
	m.sdTimeout = opts.SystemdTimeout
	if m.sdTimeout <= 0 {
		m.sdTimeout = DefaultSystemdTimeout
	}
	if m.euid != 0 {
		m.sdEndpoints = sdbus.UserManagerEndpoints(os.Getenv, m.euid)
		m.sd = sdbus.NewClient(m.sdEndpoints, m.euid, m.sdTimeout)
	}
	return m, nil
}

func ownerOf(pid int) (owner, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return owner{}, fmt.Errorf("cgroups: %w", err)
	}
	start, err := procid.ParseStartTime(stat)
	if err != nil {
		return owner{}, fmt.Errorf("cgroups: /proc/%d/stat: %w", pid, err)
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/pid", &st); err != nil {
		return owner{}, fmt.Errorf("cgroups: stat /proc/%d/ns/pid: %w", pid, err)
	}
	return owner{pid: pid, start: start, pidns: st.Ino}, nil
}

// Mode is the host's cgroup mode, detected once by NewManager.
func (m *Manager) Mode() Mode { return m.lay.mode }

// Undelegated is the one reason for having no cgroup that a caller can
// re-check cheaply before each spawn: on a host whose driver is v1, the
// pids hierarchy is mounted and the caller may not create cgroups in it
// (a rootless caller on a v1 or hybrid host). The express path records
// it as fingerprints (agentrun's expressFor) and stands aside once any of
// them changes.
type Undelegated struct {
	// Mount is the pids hierarchy's mount point; Caller the caller's
	// cgroup directory in it.
	Mount, Caller string
	// Access is faccessat(Caller, W_OK, AT_EACCESS)'s error, never nil.
	Access unix.Errno
	// StateDir holds the records Sweep reads.
	StateDir string
	// CallerHash is the Manager's CallerHash.
	CallerHash string
}

// CallerHash is FNV-1a 64, in hex, of the /proc/self/cgroup this Manager
// read: the caller's cgroups every path it derives depends on.
func (m *Manager) CallerHash() string { return m.pcHash }

// Undelegated returns why Create cannot give this caller a pids limit,
// when the reason is the v1 pids hierarchy's permissions, and false for
// every other state of the host (including one that can).
func (m *Manager) Undelegated() (Undelegated, bool) {
	if !m.lay.useV1 {
		return Undelegated{}, false
	}
	i := slices.IndexFunc(m.lay.v1, func(h hierarchy) bool { return h.has(Pids) })
	if i < 0 {
		return Undelegated{}, false
	}
	// v1Problem's reasons come down to this answer (a read-only mount
	// answers EROFS).
	h := m.lay.v1[i]
	var errno unix.Errno
	if !errors.As(writable(h.caller), &errno) || errno == 0 {
		return Undelegated{}, false
	}
	return Undelegated{Mount: h.mount, Caller: h.caller, Access: errno, StateDir: m.stateDir, CallerHash: m.pcHash}, true
}

// plan is where a new cgroup would go: one entry per hierarchy.
type plan struct {
	v2   bool
	dirs []planDir
	req  []string // controllers the limits need
	// scope is set when the cgroup goes into a transient systemd scope;
	// dirs[0].base is then the user manager's cgroup.
	scope *scopePlan
}

type planDir struct {
	base        string   // existing cgroup under which the parent goes
	controllers []string // v1: the hierarchy's controllers; v2: those to enable
}

// Check reports, without creating anything, whether res can be enforced
// for this caller: nil, an *UnusableError, or an error for invalid res.
func (m *Manager) Check(res *specs.LinuxResources) error {
	l, err := parseLimits(res)
	if err != nil {
		return err
	}
	_, err = m.plan(l)
	return err
}

func (m *Manager) plan(l limits) (plan, error) {
	req := l.required()
	switch {
	case m.lay.mode == Unavailable:
		return plan{}, unusable(ErrNoCgroupFS, "no cgroup filesystem is mounted: mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup)")
	case m.lay.useV1:
		return m.planV1(req)
	case m.lay.v2 != nil:
		return m.planV2(req)
	}
	// v1 mounts exist but carry none of memory/pids/cpu and no cgroup2.
	return plan{}, unusable(ErrNoController, "no cgroup hierarchy carries the memory, pids or cpu controller: mount cgroup2 at /sys/fs/cgroup or the v1 hierarchies")
}

func (m *Manager) planV1(req []string) (plan, error) {
	p := plan{req: req}
	var firstProblem *UnusableError
	for _, h := range m.lay.v1 {
		if why := m.v1Problem(h); why != nil {
			if firstProblem == nil {
				firstProblem = why
			}
			for _, c := range req {
				if h.has(c) {
					return plan{}, why
				}
			}
			m.log.Debug("cgroups: skipping v1 hierarchy", "controllers", h.controllers, "reason", why.Msg)
			continue
		}
		if m.limitsOnly && len(req) > 0 && !slices.ContainsFunc(req, h.has) {
			continue
		}
		p.dirs = append(p.dirs, planDir{base: h.caller, controllers: h.controllers})
	}
	for _, c := range req {
		if !slices.ContainsFunc(m.lay.v1, func(h hierarchy) bool { return h.has(c) }) {
			return plan{}, unusable(ErrNoController, fmt.Sprintf(
				"the cgroup v1 %s controller is not mounted on this %s host: mount it (mkdir -p /sys/fs/cgroup/%[1]s && mount -t cgroup -o %[1]s cgroup /sys/fs/cgroup/%[1]s)", c, m.lay.mode))
		}
	}
	if len(p.dirs) == 0 {
		if firstProblem != nil {
			return plan{}, firstProblem
		}
		return plan{}, unusable(ErrNoController, "no cgroup v1 hierarchy carries memory, pids, cpu, cpuacct or freezer")
	}
	return p, nil
}

// v1Problem says why the caller cannot create cgroups in h, or nil.
func (m *Manager) v1Problem(h hierarchy) *UnusableError {
	name := strings.Join(h.controllers, ",")
	if h.readOnly {
		return unusable(ErrNoDelegation, fmt.Sprintf(
			"cgroup v1 hierarchy %s at %s is mounted read-only: remount it read-write (mount -o remount,rw %s) or run agentrun where cgroupfs is writable", name, h.mount, h.mount))
	}
	if err := writable(h.caller); err != nil {
		if errors.Is(err, unix.EROFS) {
			return unusable(ErrNoDelegation, fmt.Sprintf(
				"cgroup v1 hierarchy %s at %s is read-only: remount it read-write or run agentrun where cgroupfs is writable", name, h.mount))
		}
		return unusable(ErrNoDelegation, fmt.Sprintf(
			"cgroup v1 hierarchy %s (%s) is not writable by uid %d: v1 cannot be delegated safely, so run as root, or boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) and use a delegated scope (systemd-run --user --scope -p Delegate=yes …)",
			name, h.caller, m.euid))
	}
	return nil
}

// v2Base is the cgroup under which agentrun's parent goes: the hierarchy
// root for root (the caller's own cgroup usually belongs to a service
// manager and holds processes), the caller's delegated cgroup rootless.
func (m *Manager) v2Base() (string, error) {
	h := m.lay.v2
	if m.euid == 0 {
		return h.mount, nil
	}
	if h.outside {
		return "", unusable(ErrNoDelegation, fmt.Sprintf(
			"the caller's cgroup v2 is not visible under %s: mount the cgroup2 filesystem so that it shows the caller's cgroup", h.mount))
	}
	base := h.caller
	// A caller already moved into callerLeaf by an earlier run keeps using
	// the delegated cgroup above it instead of nesting deeper on every run.
	if filepath.Base(base) == callerLeaf && base != h.mount {
		base = filepath.Dir(base)
	}
	return base, nil
}

func (m *Manager) planV2(req []string) (plan, error) {
	h := m.lay.v2
	base, err := m.v2Base()
	if err != nil {
		return plan{}, err
	}
	if h.readOnly {
		return plan{}, unusable(ErrNoDelegation, fmt.Sprintf(
			"cgroup v2 at %s is mounted read-only: remount it read-write or, in a container, run with a private, writable cgroup namespace", h.mount))
	}
	// Delegation, as systemd hands it out: the directory (to create
	// children), cgroup.procs (to move processes, including at clone3 time,
	// which checks the common ancestor) and cgroup.subtree_control.
	for _, p := range []string{base, filepath.Join(base, "cgroup.procs"), filepath.Join(base, "cgroup.subtree_control")} {
		if err := writable(p); err != nil {
			if errors.Is(err, unix.EROFS) {
				return plan{}, unusable(ErrNoDelegation, fmt.Sprintf(
					"cgroup v2 at %s is read-only: remount it read-write or run agentrun where cgroupfs is writable", h.mount))
			}
			// Not delegated: a transient scope from the user
			// manager is the other way to a delegated cgroup.
			if m.euid != 0 {
				return m.planScope(req, base)
			}
			return plan{}, unusable(ErrNoDelegation, m.noDelegationMsg(base))
		}
	}
	avail, err := readList(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return plan{}, fmt.Errorf("cgroups: %w", err)
	}
	for _, c := range req {
		if !slices.Contains(avail, c) {
			how := "the kernel does not offer it on cgroup v2 (not built in, or claimed by a v1 hierarchy)"
			if base != h.mount {
				how = "enable it in the parent's cgroup.subtree_control"
			}
			if m.euid != 0 {
				v2w := v2Wanted()
				how = fmt.Sprintf("ask for it to be delegated (systemd: Delegate=%s on the unit or user@.service)", strings.Join(v2w[:], " "))
			}
			return plan{}, unusable(ErrNoController, fmt.Sprintf(
				"the cgroup v2 %s controller is not available in %s (available: %s): %s",
				c, base, orNone(avail), how))
		}
	}
	p := plan{v2: true, req: req}
	d := planDir{base: base}
	for _, c := range v2Wanted() {
		if slices.Contains(avail, c) {
			d.controllers = append(d.controllers, c)
		}
	}
	p.dirs = []planDir{d}
	return p, nil
}

func (m *Manager) noDelegationMsg(base string) string {
	return fmt.Sprintf("cgroup v2 subtree %s is not writable by uid %d: run under a systemd user scope with Delegate=yes (systemd-run --user --scope -p Delegate=yes agentrun …) or ask root to chown it and its cgroup.procs, cgroup.subtree_control and cgroup.threads to you",
		base, m.euid)
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, " ")
}

// readList reads a space-separated cgroupfs list (cgroup.controllers,
// cgroup.subtree_control).
func readList(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// Info reports what this caller can do with cgroups here. It creates
// nothing and never fails: problems land in Info.Problem.
func (m *Manager) Info() Info {
	inf := Info{Mode: m.lay.mode, Available: []string{}, Usable: []string{}}
	all := limits{memory: 1, pids: 1, cpuQuota: 1000, cpuPeriod: DefaultCPUPeriod}
	switch {
	case m.lay.mode == Unavailable:
	case m.lay.useV1:
		inf.Driver = "v1"
		inf.Kill = "signals"
		for _, h := range m.lay.v1 {
			inf.Available = append(inf.Available, h.controllers...)
			if h.has(Freezer) {
				inf.Kill = "freezer"
			}
		}
		if p, err := m.planV1(nil); err == nil {
			inf.Base = p.dirs[0].base
			for _, d := range p.dirs {
				inf.Usable = append(inf.Usable, d.controllers...)
				if slices.Contains(d.controllers, Memory) {
					inf.Base = d.base // the most telling of the per-hierarchy bases
				}
			}
		}
	case m.lay.v2 != nil:
		inf.Driver = "v2"
		if ep, ok := sdbus.Reachable(m.sdEndpoints); ok {
			inf.UserManager = ep.Path
		}
		root, _ := readList(filepath.Join(m.lay.v2.mount, "cgroup.controllers"))
		inf.Available = append(inf.Available, root...)
		if p, err := m.planV2(nil); err == nil {
			inf.Usable = append(inf.Usable, p.dirs[0].controllers...)
			inf.Base = p.dirs[0].base
			inf.Delegated = m.euid != 0
			if p.scope != nil {
				inf.Scope = true
				inf.Base = p.scope.manager
			}
		} else if base, err := m.v2Base(); err == nil {
			inf.Base = base
		}
		// The root cgroup has neither cgroup.kill nor cgroup.freeze, so
		// look at a non-root one, or go by the kernel version.
		inf.Kill = "freezer"
		if inf.Base != m.lay.v2.mount && inf.Base != "" {
			if exists(filepath.Join(inf.Base, "cgroup.kill")) {
				inf.Kill = "cgroup.kill"
			}
		} else if kernelAtLeast(5, 14) {
			inf.Kill = "cgroup.kill"
		}
	}
	slices.Sort(inf.Available)
	slices.Sort(inf.Usable)
	if err := m.Check(resourcesFor(all)); err != nil {
		inf.Problem = err.Error()
	}
	return inf
}

// resourcesFor builds a LinuxResources asking for every limit in l.
func resourcesFor(l limits) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.memory > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &l.memory}
	}
	if l.pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: &l.pids}
	}
	if l.cpuQuota > 0 {
		r.CPU = &specs.LinuxCPU{Quota: &l.cpuQuota, Period: &l.cpuPeriod}
	}
	return r
}

// Create makes the cgroup for sandbox id (unique among live sandboxes)
// with the limits of res (nil: none, but the cgroup still accounts and
// kills), and records it for Sweep. It fails with an *UnusableError when
// this caller cannot use cgroups or a requested limit's controller is
// missing; nothing is left behind on any failure.
//
// Placement after Create: on v2 start the process with
// SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}; on v1 (or when clone3
// is refused) call cg.Add(pid) while the child waits at its sync point.
func (m *Manager) Create(id string, res *specs.LinuxResources) (*Cgroup, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if _, ok := parseExpressID(id); ok {
		// Sweep judges such a cgroup by its name, whatever its record says.
		return nil, fmt.Errorf("cgroups: invalid id %q: the express path's names (%s…) are not for Create", id, ExpressPrefix)
	}
	l, err := parseLimits(res)
	if err != nil {
		return nil, err
	}
	p, err := m.plan(l)
	if err != nil {
		return nil, err
	}
	if p.scope != nil {
		return m.createScope(id, p, l)
	}
	cg := &Cgroup{id: id, v2: p.v2, fd: -1, log: m.log, callerHash: m.pcHash}
	rec := record{
		Version: 1, ID: id, Parent: m.parent, V2: p.v2,
		OwnerPID: m.self.pid, OwnerStart: m.self.start, OwnerPidNS: m.self.pidns,
	}
	for _, d := range p.dirs {
		parent := filepath.Join(d.base, m.parent)
		cg.dirs = append(cg.dirs, cgDir{controllers: d.controllers, parent: parent, leaf: filepath.Join(parent, id)})
		rec.Paths = append(rec.Paths, filepath.Join(parent, id))
	}
	// The record goes first: a runtime killed between here and Delete
	// leaves something Sweep can find.
	recPath, err := m.writeRecord(rec)
	if err != nil {
		return nil, err
	}
	cg.record = recPath
	if err := m.build(cg, p, l); err != nil {
		if derr := cg.Delete(); derr != nil {
			m.log.Warn("cgroups: cleanup after failed create", "id", id, "err", derr)
		}
		return nil, err
	}
	return cg, nil
}

// build creates the directories and applies the limits.
func (m *Manager) build(cg *Cgroup, p plan, l limits) error {
	var kept []cgDir
	for i, d := range slices.Clone(cg.dirs) {
		if err := m.makeDir(p, p.dirs[i], d); err != nil {
			needed := slices.ContainsFunc(p.req, func(c string) bool { return slices.Contains(d.controllers, c) })
			var ue *UnusableError
			if needed || p.v2 || !errors.As(err, &ue) {
				return err
			}
			m.log.Debug("cgroups: skipping v1 hierarchy", "controllers", d.controllers, "err", err)
			_ = unix.Rmdir(d.parent) // if we made it and nobody else uses it
			continue
		}
		kept = append(kept, d)
	}
	cg.dirs = kept
	if len(cg.dirs) == 0 {
		return unusable(ErrNoDelegation, "no cgroup hierarchy could be used")
	}
	if err := cg.apply(l); err != nil {
		return err
	}
	if p.v2 {
		fd, err := unix.Open(cg.dirs[0].leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cgroups: open %s: %w", cg.dirs[0].leaf, err)
		}
		cg.fd = fd
	}
	return nil
}

// makeDir creates parent and leaf in one hierarchy. Another runtime may
// remove the (empty) parent between our steps, which shows as ENOENT or,
// for a cgroup being destroyed, ENODEV; the steps are then retried.
func (m *Manager) makeDir(p plan, pd planDir, d cgDir) error {
	const attempts = 20
	for attempt := 1; ; attempt++ {
		retry := func(err error) bool {
			return attempt < attempts && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV))
		}
		if p.v2 {
			if err := m.enableV2(pd.base, pd.controllers, p.req, true); err != nil {
				return err
			}
		}
		if err := mkdirOK(d.parent); err != nil {
			if retry(err) {
				continue
			}
			return m.permErr(err, d.parent)
		}
		if p.v2 {
			if err := m.enableV2(d.parent, pd.controllers, p.req, false); err != nil {
				if retry(err) {
					continue
				}
				return err
			}
		}
		err := unix.Mkdir(d.leaf, 0o755)
		switch {
		case err == nil:
		case retry(err):
			continue
		case errors.Is(err, unix.EEXIST):
			// Never adopt: it may be a live sandbox's cgroup.
			return fmt.Errorf("cgroups: %s already exists (sandbox id %q in use?)", d.leaf, filepath.Base(d.leaf))
		default:
			return m.permErr(&fs.PathError{Op: "mkdir", Path: d.leaf, Err: err}, d.leaf)
		}
		if p.v2 {
			// A parent recreated by someone else between our steps may
			// lack our controllers; start over.
			have, err := readList(filepath.Join(d.leaf, "cgroup.controllers"))
			if err != nil {
				return fmt.Errorf("cgroups: %w", err)
			}
			if missing := without(p.req, have); len(missing) > 0 {
				_ = unix.Rmdir(d.leaf)
				if attempt < attempts {
					continue
				}
				return fmt.Errorf("cgroups: controllers %v did not reach %s", missing, d.leaf)
			}
		}
		return nil
	}
}

func (m *Manager) permErr(err error, path string) error {
	if isPermission(err) {
		if m.lay.useV1 {
			return unusable(ErrNoDelegation, fmt.Sprintf("cannot create %s as uid %d (%v): run as root, or use cgroup v2 with a delegated subtree", path, m.euid, errors.Unwrap(err)))
		}
		return unusable(ErrNoDelegation, m.noDelegationMsg(filepath.Dir(path)))
	}
	return fmt.Errorf("cgroups: %w", err)
}

func without(want, have []string) []string {
	var out []string
	for _, c := range want {
		if !slices.Contains(have, c) {
			out = append(out, c)
		}
	}
	return out
}

// enableV2 makes sure dir's children get the controllers in want. Optional
// controllers (not in req) that cannot be enabled are skipped. When dir
// holds processes, v2's no-internal-process rule forbids enabling domain
// controllers; with evacuate set they are first moved into a leaf.
func (m *Manager) enableV2(dir string, want, req []string, evacuate bool) error {
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	cur, err := readList(ctl)
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	for _, c := range without(want, cur) {
		err := writeFile(ctl, "+"+c)
		if errors.Is(err, unix.EBUSY) && evacuate {
			if eerr := m.evacuate(dir); eerr != nil {
				return eerr
			}
			evacuate = false
			err = writeFile(ctl, "+"+c)
		}
		if err == nil {
			continue
		}
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("cgroups: enable %s: %w", c, err) // dir vanished: the caller retries
		}
		if !slices.Contains(req, c) {
			m.log.Debug("cgroups: optional controller not enabled", "controller", c, "dir", dir, "err", err)
			continue
		}
		switch {
		case errors.Is(err, unix.EBUSY):
			return unusable(ErrNoDelegation, fmt.Sprintf(
				"cgroup %s holds processes, so the %s controller cannot be enabled below it (cgroup v2 no-internal-process rule): start agentrun in a cgroup of its own (systemd-run --user --scope -p Delegate=yes agentrun …)", dir, c))
		case isPermission(err):
			return unusable(ErrNoDelegation, m.noDelegationMsg(dir))
		}
		return fmt.Errorf("cgroups: enable %s: %w", c, err)
	}
	return nil
}

// evacuate moves every process of dir into dir/agentrun-caller. A delegated
// cgroup (a Delegate=yes scope) typically holds the caller itself; v2 only
// lets a cgroup without processes hand controllers to its children. The
// processes stay inside the delegated subtree, so nothing escapes; the
// leaf outlives this run because the caller lives in it.
func (m *Manager) evacuate(dir string) error {
	leaf := filepath.Join(dir, callerLeaf)
	if err := mkdirOK(leaf); err != nil {
		return m.permErr(err, leaf)
	}
	for round := 0; round < 10; round++ {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("cgroups: %w", err)
		}
		pids := parsePids(b)
		if len(pids) == 0 {
			return nil
		}
		m.log.Info("cgroups: moving processes into a leaf so controllers can be enabled", "from", dir, "to", leaf, "pids", pids)
		for _, pid := range pids {
			err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(pid))
			if err != nil && !errors.Is(err, unix.ESRCH) {
				if isPermission(err) {
					return unusable(ErrNoDelegation, fmt.Sprintf(
						"cgroup %s holds process %d that uid %d cannot move, so controllers cannot be enabled below it: start agentrun in a cgroup of its own (systemd-run --user --scope -p Delegate=yes agentrun …)", dir, pid, m.euid))
				}
				return fmt.Errorf("cgroups: %w", err)
			}
		}
	}
	return fmt.Errorf("cgroups: processes keep appearing in %s", dir)
}

// kernelAtLeast compares the running kernel's release with major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
