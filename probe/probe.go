// Package probe owns `agentrun probe`: it finds out what this host and this
// caller offer the sandbox (user namespaces and what blocks them, cgroup
// mode and usable controllers, seccomp and user notification, Landlock,
// overlayfs in user namespaces, pidfd, clone3 and CLONE_INTO_CGROUP, the
// kernel version), says which guarantees of the default policy hold here,
// and renders that as JSON or a table. It also explains, in one line, what
// blocks user namespaces, for the core's error message.
//
// Every check is a pure function over an Env (a filesystem root and a few
// syscall probes), so the decisions are unit-tested with fake hosts; Probe
// runs them against the real one.
package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/agentrun/agentrun/cgroups"
)

// Env is what the checks read. HostEnv returns the real one; tests fake it.
type Env struct {
	// FS is the host's root directory (os.DirFS("/")); paths have no
	// leading slash, as fs.FS wants.
	FS   fs.FS
	Euid int
	// Uname returns the kernel release (uname -r).
	Uname func() (string, error)
	// TryUserns creates a user namespace in a child and reports the error.
	TryUserns func() error
	// SeccompActionAvail is seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action).
	SeccompActionAvail func(action uint32) error
	// LandlockABI is landlock_create_ruleset(NULL, 0, VERSION).
	LandlockABI func() (int, error)
	// PidfdOpenSelf is pidfd_open(getpid(), 0) (descriptor closed again).
	PidfdOpenSelf func() error
	// Clone3 calls clone3 with arguments the kernel must reject (EINVAL
	// when clone3 exists, ENOSYS when it or a seccomp filter says no).
	Clone3 func() error
	// Cgroups returns what cgroups offer this caller.
	Cgroups func() (cgroups.Info, error)
}

// Report is the result of a probe. Its JSON form is the stable interface of
// `agentrun probe --json`.
type Report struct {
	Kernel     Kernel       `json:"kernel"`
	UID        int          `json:"uid"`
	Namespaces []string     `json:"namespaces"`
	Userns     Userns       `json:"userns"`
	Cgroups    CgroupReport `json:"cgroups"`
	Seccomp    Seccomp      `json:"seccomp"`
	Landlock   Landlock     `json:"landlock"`
	Overlay    Overlay      `json:"overlay_in_userns"`
	Pidfd      Feature      `json:"pidfd"`
	Clone3     Clone3       `json:"clone3"`
	Guarantees []Guarantee  `json:"guarantees"`
}

// Kernel is the running kernel.
type Kernel struct {
	Release string `json:"release"`
	Major   int    `json:"major"`
	Minor   int    `json:"minor"`
	Patch   int    `json:"patch"`
}

// AtLeast compares the kernel with major.minor.
func (k Kernel) AtLeast(major, minor int) bool {
	return k.Major > major || k.Major == major && k.Minor >= minor
}

// Feature is a yes/no capability with the reason when no.
type Feature struct {
	Available bool   `json:"available"`
	Detail    string `json:"detail,omitempty"`
}

// Userns is what governs user namespaces here.
type Userns struct {
	// Available reports whether this caller just created one (in a child
	// process).
	Available bool   `json:"available"`
	Error     string `json:"error,omitempty"`
	// Unprivileged reports whether, by the sysctls, unprivileged users may
	// create them.
	Unprivileged bool `json:"unprivileged"`
	// The sysctls; absent when the kernel has no such knob.
	MaxUserNamespaces       *int64 `json:"max_user_namespaces,omitempty"`
	UnprivilegedUsernsClone *int64 `json:"unprivileged_userns_clone,omitempty"`
	AppArmorRestrict        *int64 `json:"apparmor_restrict_unprivileged_userns,omitempty"`
	// Blocker says what blocks them, for this caller (or, when the caller
	// is root, for unprivileged users); empty when nothing does.
	Blocker string `json:"blocker,omitempty"`
}

// CgroupReport is the cgroup part: this caller's view plus what root and
// an unprivileged user get.
type CgroupReport struct {
	cgroups.Info
	// Root are the controllers root can limit.
	Root []string `json:"root"`
	// Rootless are the controllers an unprivileged user can limit, when
	// known; RootlessDetail says what decides it.
	Rootless       []string `json:"rootless"`
	RootlessDetail string   `json:"rootless_detail,omitempty"`
	Error          string   `json:"error,omitempty"`
}

// Seccomp is seccomp filter support.
type Seccomp struct {
	Filter bool `json:"filter"`
	// UserNotif reports whether SECCOMP_RET_USER_NOTIF is available
	// (violations can be reported instead of just denied).
	UserNotif bool `json:"user_notif"`
	// Actions as listed in /proc/sys/kernel/seccomp/actions_avail.
	Actions []string `json:"actions,omitempty"`
	// CallerFiltered reports whether this process already runs under a
	// filter (a container runtime's), which may refuse what the sandbox
	// needs.
	CallerFiltered bool   `json:"caller_filtered"`
	Detail         string `json:"detail,omitempty"`
}

// Landlock is the Landlock LSM's ABI version (0: unavailable).
type Landlock struct {
	ABI    int    `json:"abi"`
	Detail string `json:"detail,omitempty"`
}

// Overlay says whether overlayfs can be mounted inside a user namespace.
type Overlay struct {
	Available bool   `json:"available"`
	Detail    string `json:"detail,omitempty"`
}

// Clone3 covers clone3 and CLONE_INTO_CGROUP.
type Clone3 struct {
	Available bool `json:"available"`
	// IntoCgroup reports whether CLONE_INTO_CGROUP works for agentrun's
	// cgroups here (kernel 5.7+ and the v2 driver).
	IntoCgroup bool   `json:"into_cgroup"`
	Detail     string `json:"detail,omitempty"`
}

// Guarantee is one promise of the default policy and whether it holds.
type Guarantee struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Required reports whether the default policy cannot be enforced
	// without it (the rest are hardening or apply only when asked for).
	Required bool   `json:"required"`
	Detail   string `json:"detail,omitempty"`
}

// emptyFS stands in for a missing Env.FS: every file is absent.
type emptyFS struct{}

func (emptyFS) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// Run performs every check against env. Nil probes count as unavailable.
func Run(env Env) Report {
	if env.FS == nil {
		env.FS = emptyFS{}
	}
	r := Report{UID: env.Euid}
	r.Kernel = checkKernel(env)
	r.Namespaces = checkNamespaces(env.FS)
	r.Userns = checkUserns(env)
	r.Cgroups = checkCgroups(env)
	r.Seccomp = checkSeccomp(env)
	r.Landlock = checkLandlock(env)
	r.Overlay = checkOverlay(env.FS, r.Kernel)
	r.Pidfd = checkPidfd(env)
	r.Clone3 = checkClone3(env, r.Kernel, r.Cgroups)
	r.Guarantees = guarantees(r)
	return r
}

// ParseKernelRelease reads "6.18.44-fc-v595" as 6, 18, 44. Only the
// leading dotted numbers count ("5.10.0-28-cloud-amd64" is 5.10.0).
func ParseKernelRelease(rel string) Kernel {
	k := Kernel{Release: rel}
	head := rel
	if i := strings.IndexFunc(rel, func(r rune) bool { return (r < '0' || r > '9') && r != '.' }); i >= 0 {
		head = rel[:i]
	}
	dst := []*int{&k.Major, &k.Minor, &k.Patch}
	for i, n := range strings.Split(head, ".") {
		if i < len(dst) {
			*dst[i], _ = strconv.Atoi(n)
		}
	}
	return k
}

func checkKernel(env Env) Kernel {
	if env.Uname == nil {
		return Kernel{}
	}
	rel, err := env.Uname()
	if err != nil {
		return Kernel{}
	}
	return ParseKernelRelease(rel)
}

// nsKinds are the namespaces the default policy creates. (A function: the
// package keeps no mutable state.)
func nsKinds() []string { return []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} }

func checkNamespaces(fsys fs.FS) []string {
	out := []string{}
	for _, n := range nsKinds() {
		if _, err := fs.Stat(fsys, "proc/self/ns/"+n); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// readInt reads a one-number file; nil when absent or unparsable.
func readInt(fsys fs.FS, name string) *int64 {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return nil
	}
	return &v
}

// UsernsReadings are the inputs of the user namespace diagnosis.
type UsernsReadings struct {
	// HasUserNS reports whether the kernel has user namespaces
	// (/proc/self/ns/user).
	HasUserNS bool
	// Sysctls; nil when the file does not exist on this kernel.
	MaxUserNamespaces       *int64 // /proc/sys/user/max_user_namespaces
	UnprivilegedUsernsClone *int64 // /proc/sys/kernel/unprivileged_userns_clone (Debian, Ubuntu)
	AppArmorRestrict        *int64 // /proc/sys/kernel/apparmor_restrict_unprivileged_userns (Ubuntu 23.10+)
	Euid                    int
	// CloneErr is the error of a failed clone/unshare(CLONE_NEWUSER), if
	// the caller has one; nil otherwise.
	CloneErr error
}

// ReadUserns takes the readings from fsys (the host root) for euid.
func ReadUserns(fsys fs.FS, euid int) UsernsReadings {
	r := UsernsReadings{Euid: euid}
	_, err := fs.Stat(fsys, "proc/self/ns/user")
	r.HasUserNS = err == nil
	r.MaxUserNamespaces = readInt(fsys, "proc/sys/user/max_user_namespaces")
	r.UnprivilegedUsernsClone = readInt(fsys, "proc/sys/kernel/unprivileged_userns_clone")
	r.AppArmorRestrict = readInt(fsys, "proc/sys/kernel/apparmor_restrict_unprivileged_userns")
	return r
}

func is(p *int64, v int64) bool { return p != nil && *p == v }

// Blocker is the one-line explanation of what stops this caller from
// creating user namespaces, or "" when nothing known does. Root is exempt
// from the unprivileged-only knobs.
func (r UsernsReadings) Blocker() string {
	unpriv := r.Euid != 0
	var errno syscall.Errno
	errors.As(r.CloneErr, &errno)
	switch {
	case !r.HasUserNS && r.MaxUserNamespaces == nil:
		return "the kernel has no user namespace support (CONFIG_USER_NS is off): use a kernel built with it"
	case is(r.MaxUserNamespaces, 0):
		return "user namespaces are disabled: user.max_user_namespaces is 0 (run: sysctl -w user.max_user_namespaces=15000)"
	case errno == syscall.ENOSPC:
		max := "its limit"
		if r.MaxUserNamespaces != nil {
			max = strconv.FormatInt(*r.MaxUserNamespaces, 10)
		}
		return fmt.Sprintf("the user namespace limit is reached (user.max_user_namespaces=%s for this user, or 32 levels of nesting): raise it with sysctl -w user.max_user_namespaces=N or end idle sandboxes", max)
	case unpriv && is(r.UnprivilegedUsernsClone, 0):
		return "unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone is 0 (run: sysctl -w kernel.unprivileged_userns_clone=1)"
	case unpriv && is(r.AppArmorRestrict, 1):
		return "AppArmor restricts unprivileged user namespaces: kernel.apparmor_restrict_unprivileged_userns is 1 (add an AppArmor profile allowing userns for agentrun, or run: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)"
	case errno == syscall.EUSERS:
		return "user namespaces are nested too deeply (the kernel allows 32 levels): run agentrun from a shallower namespace"
	case errno == syscall.EPERM:
		return "creating a user namespace was refused (EPERM) although the sysctls allow it: the calling environment (a container's seccomp profile or an LSM policy) blocks it; run agentrun outside that sandbox or allow CLONE_NEWUSER there"
	case errno == syscall.EINVAL:
		return "the kernel refused CLONE_NEWUSER (EINVAL): agentrun runs chrooted, or the kernel lacks user namespace support"
	case r.CloneErr != nil:
		return fmt.Sprintf("creating a user namespace failed: %v", r.CloneErr)
	}
	return ""
}

// UsernsBlocker returns the one-line explanation of what blocks user
// namespaces for this process, read from the running host, or "" when no
// known cause applies (then print the clone error itself).
func UsernsBlocker() string {
	return ReadUserns(os.DirFS("/"), os.Geteuid()).Blocker()
}

// UsernsBlockerFor is UsernsBlocker refined by the error of the failed
// clone(CLONE_NEWUSER) or unshare: ENOSPC, EUSERS and EPERM point at
// different causes.
func UsernsBlockerFor(cloneErr error) string {
	r := ReadUserns(os.DirFS("/"), os.Geteuid())
	r.CloneErr = cloneErr
	return r.Blocker()
}

func checkUserns(env Env) Userns {
	rd := ReadUserns(env.FS, env.Euid)
	u := Userns{
		MaxUserNamespaces:       rd.MaxUserNamespaces,
		UnprivilegedUsernsClone: rd.UnprivilegedUsernsClone,
		AppArmorRestrict:        rd.AppArmorRestrict,
	}
	if env.TryUserns != nil {
		rd.CloneErr = env.TryUserns()
		u.Available = rd.CloneErr == nil
		if rd.CloneErr != nil {
			u.Error = rd.CloneErr.Error()
		}
	}
	// What an unprivileged user would meet, independent of who probes.
	asUser := rd
	asUser.Euid, asUser.CloneErr = 65534, nil
	u.Unprivileged = asUser.Blocker() == ""
	u.Blocker = rd.Blocker()
	if u.Blocker == "" && env.Euid == 0 && !u.Unprivileged {
		u.Blocker = "for unprivileged users: " + asUser.Blocker()
	}
	return u
}

func checkCgroups(env Env) CgroupReport {
	c := CgroupReport{Root: []string{}, Rootless: []string{}}
	if env.Cgroups == nil {
		c.Info = cgroups.Info{Mode: cgroups.Unavailable, Available: []string{}, Usable: []string{}}
		c.Error = "not probed"
		return c
	}
	inf, err := env.Cgroups()
	if err != nil {
		c.Error = err.Error()
		inf.Mode = cgroups.Unavailable
	}
	if inf.Available == nil {
		inf.Available = []string{}
	}
	if inf.Usable == nil {
		inf.Usable = []string{}
	}
	c.Info = inf
	limitable := func(l []string) []string {
		out := []string{}
		for _, x := range l {
			if x == cgroups.Memory || x == cgroups.Pids || x == cgroups.CPU {
				out = append(out, x)
			}
		}
		return out
	}
	switch {
	case inf.Mode == cgroups.Unavailable:
		c.RootlessDetail = "no cgroup filesystem"
	case env.Euid == 0:
		c.Root = limitable(inf.Usable)
		if inf.Driver == "v1" {
			c.RootlessDetail = "none: cgroup v1 hierarchies are root-owned and cannot be delegated safely"
		} else {
			c.RootlessDetail = "needs a delegated subtree (its own cgroup delegated by systemd, e.g. systemd-run --user --scope -p Delegate=yes) or a systemd user manager that agentrun asks for a Delegate=yes transient scope; run `agentrun probe` as that user to see it"
		}
	default:
		c.Rootless = limitable(inf.Usable)
		c.RootlessDetail = inf.Problem
		if inf.Scope && c.RootlessDetail == "" {
			c.RootlessDetail = "through a transient scope (Delegate=yes) of the systemd user manager at " + inf.UserManager
		}
		// Root can use what the host mounts (v1) or the root cgroup
		// offers (v2).
		c.Root = limitable(inf.Available)
	}
	return c
}

const (
	seccompRetKillProcess = 0x80000000
	seccompRetUserNotif   = 0x7fc00000
)

func checkSeccomp(env Env) Seccomp {
	s := Seccomp{}
	if b, err := fs.ReadFile(env.FS, "proc/sys/kernel/seccomp/actions_avail"); err == nil {
		s.Actions = strings.Fields(string(b))
	}
	if b, err := fs.ReadFile(env.FS, "proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
				s.CallerFiltered = strings.TrimSpace(v) == "2"
			}
		}
	}
	if env.SeccompActionAvail == nil {
		s.Filter = len(s.Actions) > 0
		s.UserNotif = slices.Contains(s.Actions, "user_notif")
		return s
	}
	// The kill action exists wherever filters do (4.14+ answers the
	// query; older kernels fail it with EINVAL but may still filter).
	err := env.SeccompActionAvail(seccompRetKillProcess)
	s.Filter = err == nil || len(s.Actions) > 0
	if !s.Filter {
		s.Detail = fmt.Sprintf("seccomp filters unavailable: %v (kernel without CONFIG_SECCOMP_FILTER?)", err)
		return s
	}
	if err := env.SeccompActionAvail(seccompRetUserNotif); err == nil {
		s.UserNotif = true
	} else {
		s.Detail = fmt.Sprintf("SECCOMP_RET_USER_NOTIF unavailable (%v): needs kernel 5.0+; violations are denied but not reported", err)
	}
	return s
}

func checkLandlock(env Env) Landlock {
	if env.LandlockABI == nil {
		return Landlock{Detail: "not probed"}
	}
	abi, err := env.LandlockABI()
	if err == nil && abi > 0 {
		return Landlock{ABI: abi}
	}
	var errno syscall.Errno
	errors.As(err, &errno)
	switch errno {
	case syscall.ENOSYS:
		return Landlock{Detail: "the kernel has no Landlock (needs 5.13+ with CONFIG_SECURITY_LANDLOCK)"}
	case syscall.EOPNOTSUPP:
		return Landlock{Detail: "Landlock is built in but disabled at boot: add landlock to the lsm= kernel parameter"}
	}
	return Landlock{Detail: fmt.Sprintf("Landlock unavailable: %v", err)}
}

// checkOverlay decides from the kernel version and the filesystem list:
// unprivileged overlay mounts arrived in 5.11; before, only Ubuntu's
// permit_mounts_in_userns module parameter allowed them. Mounting needs a
// child in fresh namespaces, which only the core can make (Go processes
// cannot unshare a user namespace in place).
func checkOverlay(fsys fs.FS, k Kernel) Overlay {
	registered := false
	if b, err := fs.ReadFile(fsys, "proc/filesystems"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[len(f)-1] == "overlay" {
				registered = true
			}
		}
	}
	loadable := false
	if !registered && k.Release != "" {
		matches, _ := fs.Glob(fsys, "lib/modules/"+k.Release+"/kernel/fs/overlayfs/overlay.ko*")
		loadable = len(matches) > 0
	}
	b, err := fs.ReadFile(fsys, "sys/module/overlay/parameters/permit_mounts_in_userns")
	ubuntuParam := err == nil && strings.TrimSpace(string(b)) == "Y"
	switch {
	case !registered && !loadable:
		return Overlay{Detail: "overlayfs is not available (not in /proc/filesystems and no module)"}
	case !k.AtLeast(5, 11) && !ubuntuParam:
		return Overlay{Detail: fmt.Sprintf("kernel %s is older than 5.11: overlayfs cannot be mounted in a user namespace", k.Release)}
	case !registered:
		return Overlay{Available: true, Detail: "overlay module not loaded yet; it loads on first mount when the host allows module autoloading"}
	}
	return Overlay{Available: true}
}

func checkPidfd(env Env) Feature {
	if env.PidfdOpenSelf == nil {
		return Feature{Detail: "not probed"}
	}
	if err := env.PidfdOpenSelf(); err != nil {
		return Feature{Detail: fmt.Sprintf("pidfd_open: %v (needs kernel 5.3+); process handling falls back to pids", err)}
	}
	return Feature{Available: true}
}

func checkClone3(env Env, k Kernel, cg CgroupReport) Clone3 {
	c := Clone3{}
	if env.Clone3 == nil {
		c.Detail = "not probed"
		return c
	}
	err := env.Clone3()
	var errno syscall.Errno
	errors.As(err, &errno)
	switch errno {
	case syscall.EINVAL, syscall.EFAULT, syscall.E2BIG:
		c.Available = true
	case syscall.ENOSYS:
		c.Detail = "clone3 unavailable (ENOSYS): kernel older than 5.3, or a seccomp filter of the calling environment hides it"
		return c
	default:
		c.Detail = fmt.Sprintf("clone3 probe: %v", err)
		return c
	}
	switch {
	case !k.AtLeast(5, 7):
		c.Detail = "CLONE_INTO_CGROUP needs kernel 5.7+; the sandbox is placed with a cgroup.procs write before it runs"
	case cg.Driver != "v2":
		c.Detail = "CLONE_INTO_CGROUP only places into cgroup v2; on this " + string(cg.Mode) + " host the sandbox is placed in the v1 hierarchies before it runs"
	default:
		c.IntoCgroup = true
	}
	return c
}

// guarantees maps the probe onto the promises of the default policy.
func guarantees(r Report) []Guarantee {
	has := func(ns string) bool { return slices.Contains(r.Namespaces, ns) }
	userns := r.Userns.Available
	usernsDetail := r.Userns.Blocker
	if !userns && usernsDetail == "" {
		usernsDetail = "user namespaces unavailable: " + r.Userns.Error
	}
	nsGuarantee := func(name, ns, what string) Guarantee {
		g := Guarantee{Name: name, Required: true, OK: userns && has(ns)}
		switch {
		case !has(ns):
			g.Detail = fmt.Sprintf("the kernel has no %s namespaces: %s", ns, what)
		case !userns:
			g.Detail = usernsDetail
		}
		return g
	}
	limits := Guarantee{Name: "limits (--memory/--pids/--cpus) and the default pids limit", OK: len(r.Cgroups.Usable) > 0}
	if !limits.OK {
		limits.Detail = r.Cgroups.Problem
		if limits.Detail == "" {
			limits.Detail = r.Cgroups.Error
		}
	} else if miss := missing([]string{cgroups.Memory, cgroups.Pids, cgroups.CPU}, r.Cgroups.Usable); len(miss) > 0 {
		limits.OK = false
		limits.Detail = "controllers not usable by this caller: " + strings.Join(miss, ", ") + ". " + r.Cgroups.Problem
	}
	g := []Guarantee{
		{Name: "user namespace (unprivileged root inside, no host privilege)", Required: true, OK: userns, Detail: ifNot(userns, usernsDetail)},
		nsGuarantee("filesystem view limited to the policy (mount namespace, pivot_root)", "mnt", "host files cannot be hidden"),
		nsGuarantee("host processes invisible and whole tree ends with the sandbox (pid namespace)", "pid", "host processes stay visible"),
		nsGuarantee("no network, loopback or abstract sockets when off (network namespace)", "net", "the host network stays reachable"),
		nsGuarantee("private IPC and hostname", "ipc", "System V IPC is shared"),
		{Name: "dangerous syscalls blocked (seccomp filter)", Required: true, OK: r.Seccomp.Filter, Detail: ifNot(r.Seccomp.Filter, r.Seccomp.Detail)},
		{Name: "policy violations reported (seccomp user notification)", OK: r.Seccomp.UserNotif, Detail: ifNot(r.Seccomp.UserNotif, r.Seccomp.Detail)},
		limits,
		{Name: "Landlock filesystem rules (defence in depth)", OK: r.Landlock.ABI > 0, Detail: ifNot(r.Landlock.ABI > 0, r.Landlock.Detail)},
		{Name: "overlay mounts inside the sandbox", OK: r.Overlay.Available, Detail: ifNot(r.Overlay.Available, r.Overlay.Detail)},
	}
	return g
}

func ifNot(ok bool, s string) string {
	if ok {
		return ""
	}
	return s
}

func missing(want, have []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// Enforceable reports whether the default policy can be enforced here; when
// not, missing holds one line per required guarantee that fails.
func (r Report) Enforceable() (ok bool, missing []string) {
	for _, g := range r.Guarantees {
		if g.Required && !g.OK {
			line := g.Name
			if g.Detail != "" {
				line += ": " + g.Detail
			}
			missing = append(missing, line)
		}
	}
	return len(missing) == 0, missing
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// WriteTable writes the report as a readable table: one row per check,
// then the guarantees of the default policy and the verdict.
func (r Report) WriteTable(w io.Writer) error {
	mark := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, ok bool, detail string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, mark(ok), detail)
	}
	cg := r.Cgroups
	fmt.Fprintf(tw, "CHECK\tOK\tDETAIL\n")
	row("kernel", r.Kernel.Major > 0, fmt.Sprintf("%s (probed as uid %d)", orDash(r.Kernel.Release), r.UID))
	row("namespaces", len(missing(nsKinds(), r.Namespaces)) == 0, strings.Join(r.Namespaces, " "))
	row("user namespaces (this caller)", r.Userns.Available, firstNonEmpty(r.Userns.Blocker, r.Userns.Error))
	row("user namespaces (unprivileged)", r.Userns.Unprivileged, usernsSysctls(r.Userns))
	row("cgroups", cg.Mode != cgroups.Unavailable, fmt.Sprintf("mode %s, driver %s, available: %s", cg.Mode, orDash(cg.Driver), orNone(cg.Available)))
	if len(cg.Usable) > 0 {
		row("cgroup limits (this caller)", true, fmt.Sprintf("%s; kill via %s; under %s", orNone(cg.Usable), orDash(cg.Kill), orDash(cg.Base)))
	} else {
		row("cgroup limits (this caller)", false, firstNonEmpty(cg.Problem, cg.Error))
	}
	if r.UID != 0 && cg.Driver == "v2" {
		switch {
		case cg.UserManager == "":
			row("systemd user manager", false, "none reachable: rootless limits need a delegated cgroup of the caller's own")
		case cg.Scope:
			row("systemd user manager", true, "at "+cg.UserManager+"; rootless limits go into a transient scope (Delegate=yes) per sandbox")
		case cg.Delegated:
			row("systemd user manager", true, "at "+cg.UserManager+"; not needed: the caller's own cgroup is delegated")
		default:
			row("systemd user manager", false, "at "+cg.UserManager+", but no transient scope is usable: see the cgroup limits row")
		}
	}
	row("cgroup limits (root)", len(cg.Root) > 0, orNone(cg.Root))
	if len(cg.Rootless) > 0 {
		row("cgroup limits (rootless)", true, orNone(cg.Rootless))
	} else {
		row("cgroup limits (rootless)", false, cg.RootlessDetail)
	}
	row("seccomp filter", r.Seccomp.Filter, ifNot(r.Seccomp.Filter, r.Seccomp.Detail)+callerFiltered(r.Seccomp))
	row("seccomp user notification", r.Seccomp.UserNotif, ifNot(r.Seccomp.UserNotif, r.Seccomp.Detail))
	row("landlock", r.Landlock.ABI > 0, firstNonEmpty(r.Landlock.Detail, fmt.Sprintf("ABI %d", r.Landlock.ABI)))
	row("overlayfs in user namespaces", r.Overlay.Available, r.Overlay.Detail)
	row("pidfd", r.Pidfd.Available, r.Pidfd.Detail)
	row("clone3", r.Clone3.Available, ifNot(r.Clone3.Available, r.Clone3.Detail))
	row("CLONE_INTO_CGROUP", r.Clone3.IntoCgroup, ifNot(r.Clone3.IntoCgroup, r.Clone3.Detail))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "DEFAULT POLICY GUARANTEE\tHOLDS\tDETAIL\n")
	for _, g := range r.Guarantees {
		name := g.Name
		if !g.Required {
			name += " (optional)"
		}
		row(name, g.OK, g.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ok, miss := r.Enforceable()
	if ok {
		_, err := fmt.Fprintln(w, "\nThe default policy can be enforced on this host.")
		return err
	}
	_, err := fmt.Fprintf(w, "\nThe default policy CANNOT be enforced on this host:\n  - %s\n", strings.Join(miss, "\n  - "))
	return err
}

func usernsSysctls(u Userns) string {
	var parts []string
	add := func(name string, v *int64) {
		if v != nil {
			parts = append(parts, fmt.Sprintf("%s=%d", name, *v))
		}
	}
	add("user.max_user_namespaces", u.MaxUserNamespaces)
	add("kernel.unprivileged_userns_clone", u.UnprivilegedUsernsClone)
	add("kernel.apparmor_restrict_unprivileged_userns", u.AppArmorRestrict)
	return strings.Join(parts, " ")
}

func callerFiltered(s Seccomp) string {
	if s.CallerFiltered {
		return " (agentrun itself already runs under a seccomp filter)"
	}
	return ""
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
