//go:build linux

package cgroups

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// How long Kill waits for a tree to die and Delete for the kernel to let go
// of a directory. A frozen-and-killed tree empties in milliseconds; the
// bound is for a kernel stuck in uninterruptible sleep (D state).
const (
	killTimeout   = 5 * time.Second
	deleteTimeout = 2 * time.Second
)

// Cgroup is one sandbox's cgroup: a single directory on v2, one per v1
// hierarchy otherwise. Its methods may be called from several goroutines
// (a timeout calling Kill while the spawner waits).
type Cgroup struct {
	id     string
	v2     bool
	dirs   []cgDir
	record string // state record path; "" when not recorded
	log    *slog.Logger
	// callerHash is the creating Manager's CallerHash.
	callerHash string

	mu      sync.Mutex
	fd      int // v2 directory fd for CLONE_INTO_CGROUP; -1 when closed or v1
	deleted bool
	// scope is set when the cgroup lives in a transient systemd scope
	// (see scope_linux.go).
	scope *scope
}

type cgDir struct {
	controllers []string // v1: the hierarchy's; v2: enabled ones
	parent      string   // <base>/agentrun
	leaf        string   // <base>/agentrun/<id>
}

// ID is the sandbox id the cgroup was created for.
func (c *Cgroup) ID() string { return c.id }

// V2 reports whether this is a cgroup v2 (unified) cgroup.
func (c *Cgroup) V2() bool { return c.v2 }

// Paths are the cgroup directories, one per hierarchy.
func (c *Cgroup) Paths() []string {
	p := make([]string, len(c.dirs))
	for i, d := range c.dirs {
		p[i] = d.leaf
	}
	return p
}

// Controllers are the controllers of the i-th of Paths: a v1 hierarchy's
// own, or those enabled on v2.
func (c *Cgroup) Controllers(i int) []string { return slices.Clone(c.dirs[i].controllers) }

// Record is the state record that lets a later Sweep remove this cgroup
// when its runtime dies; "" when there is none.
func (c *Cgroup) Record() string { return c.record }

// CallerHash is the creating Manager's CallerHash: FNV-1a 64 of the
// /proc/self/cgroup the cgroup's place was derived from.
func (c *Cgroup) CallerHash() string { return c.callerHash }

// FD returns an open O_DIRECTORY descriptor of the v2 cgroup for
// SysProcAttr{UseCgroupFD: true, CgroupFD: fd}: clone3 CLONE_INTO_CGROUP
// then starts the child inside the cgroup, so not one instruction of it
// runs unlimited. It returns -1 on v1 (use Add). The descriptor stays valid
// until Delete. If clone3 is refused (ENOSYS from an old kernel or a
// seccomp filter, EOPNOTSUPP), start without it and call Add.
func (c *Cgroup) FD() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fd
}

// Add moves process pid (all its threads) into the cgroup, in every
// hierarchy. It must be called while the child is still blocked at its sync
// point, before it runs user code and before it unshares its cgroup
// namespace, so that nothing it forks escapes the limits. On v2 it is the
// fallback for when CLONE_INTO_CGROUP cannot be used.
func (c *Cgroup) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroups: add: invalid pid %d", pid)
	}
	if c.scope != nil {
		return c.scope.attach(c.id, pid)
	}
	for _, d := range c.dirs {
		if err := writeFile(filepath.Join(d.leaf, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroups: add pid %d: %w", pid, err)
		}
	}
	return nil
}

// OpenTasks opens the v1 "tasks" file of every hierarchy for writing, for
// a child that moves itself: a single-threaded child that writes "0" to
// each joins the cgroup without Add's cost. Writing a pid to cgroup.procs
// migrates a whole thread group, which on v1 takes the global threadgroup
// lock for writing and so waits for an RCU grace period (about 12 ms on
// the development hosts); moving the calling thread alone skips that lock.
// It returns nil on v2, where FD places the child at clone time. The
// caller closes the files.
func (c *Cgroup) OpenTasks() ([]*os.File, error) {
	if c.v2 {
		return nil, nil
	}
	files := make([]*os.File, 0, len(c.dirs))
	for _, d := range c.dirs {
		f, err := os.OpenFile(filepath.Join(d.leaf, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			for _, o := range files {
				o.Close()
			}
			return nil, fmt.Errorf("cgroups: open tasks: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// procs lists every process in the cgroup and below it, over all
// hierarchies (a sandbox may have made sub-cgroups of its own).
func (c *Cgroup) procs() ([]int, error) {
	var all []int
	var errs []error
	for _, d := range c.dirs {
		for _, dir := range subdirsDeepestFirst(d.leaf) {
			b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
				continue
			}
			all = append(all, parsePids(b)...)
		}
	}
	slices.Sort(all)
	return slices.Compact(all), errors.Join(errs...)
}

// errNotCreated guards the methods against a Cgroup not made by Create.
var errNotCreated = errors.New("cgroups: Cgroup was not made by Manager.Create")

// Populated reports whether any process is left in the cgroup.
func (c *Cgroup) Populated() (bool, error) {
	if len(c.dirs) == 0 {
		return false, errNotCreated
	}
	if c.v2 {
		b, err := os.ReadFile(filepath.Join(c.dirs[0].leaf, "cgroup.events"))
		if err == nil {
			return parseKV(b)["populated"] != 0, nil
		}
		if errors.Is(err, os.ErrNotExist) && !exists(c.dirs[0].leaf) {
			return false, nil
		}
		return false, fmt.Errorf("cgroups: %w", err)
	}
	p, err := c.procs()
	return len(p) > 0, err
}

// Kill kills every process in the cgroup (daemonized descendants included)
// and returns once none is left or killTimeout passes. v2 uses cgroup.kill
// (5.14+), which the kernel applies to the tree atomically; otherwise the
// tree is frozen, every pid gets SIGKILL (a frozen task can neither fork
// nor exit, so the pids cannot be reused under us), and it is thawed so the
// signals land; repeated until empty.
func (c *Cgroup) Kill() error {
	if len(c.dirs) == 0 {
		return errNotCreated
	}
	deadline := time.Now().Add(killTimeout)
	if c.v2 {
		done, err := c.cgroupKill(deadline)
		if done || err != nil {
			return err
		}
	}
	return c.signalKill(deadline)
}

// cgroupKill uses v2 cgroup.kill; done is false when the kernel lacks it.
func (c *Cgroup) cgroupKill(deadline time.Time) (done bool, err error) {
	err = writeFile(filepath.Join(c.dirs[0].leaf, "cgroup.kill"), "1")
	switch {
	case err == nil:
		return true, c.waitEmpty(deadline)
	case !errors.Is(err, os.ErrNotExist):
		return true, fmt.Errorf("cgroups: kill: %w", err)
	case !exists(c.dirs[0].leaf):
		return true, nil // already deleted
	}
	return false, nil
}

// signalKill is freeze, SIGKILL every pid, thaw, until the tree is empty.
func (c *Cgroup) signalKill(deadline time.Time) error {
	delay := time.Millisecond
	for {
		pids, err := c.procs()
		if err != nil {
			return fmt.Errorf("cgroups: kill: %w", err)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups: kill: processes %v still in %s after %v", pids, c.dirs[0].leaf, killTimeout)
		}
		if c.freeze() {
			// Re-read: forks that raced the freeze are now visible.
			if p, err := c.procs(); err == nil {
				pids = p
			}
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
				c.log.Debug("cgroups: kill", "pid", pid, "err", err)
			}
		}
		c.thaw()
		time.Sleep(delay)
		delay = min(delay*2, 20*time.Millisecond)
	}
}

func (c *Cgroup) waitEmpty(deadline time.Time) error {
	delay := 500 * time.Microsecond
	for {
		pop, err := c.Populated()
		if err != nil {
			return fmt.Errorf("cgroups: kill: %w", err)
		}
		if !pop {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups: kill: %s still populated after %v", c.dirs[0].leaf, killTimeout)
		}
		time.Sleep(delay)
		delay = min(delay*2, 20*time.Millisecond)
	}
}

// freeze stops the tree and reports whether it is frozen (best effort: a
// task in uninterruptible sleep can hold the freeze off).
func (c *Cgroup) freeze() bool {
	var file, on, done string
	switch {
	case c.v2:
		file, on = filepath.Join(c.dirs[0].leaf, "cgroup.freeze"), "1"
	default:
		d, ok := c.dir(Freezer)
		if !ok {
			return false
		}
		file, on = filepath.Join(d, "freezer.state"), "FROZEN"
	}
	if err := writeFile(file, on); err != nil {
		c.log.Debug("cgroups: freeze", "err", err)
		return false
	}
	deadline := time.Now().Add(100 * time.Millisecond)
	for {
		var b []byte
		var err error
		if c.v2 {
			b, err = os.ReadFile(filepath.Join(c.dirs[0].leaf, "cgroup.events"))
			done = "frozen 1"
		} else {
			b, err = os.ReadFile(file)
			done = "FROZEN"
		}
		if err != nil {
			return false
		}
		if strings.Contains(string(b), done) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		// v1 may park in FREEZING; writing again retries the freeze.
		if !c.v2 {
			_ = writeFile(file, on)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *Cgroup) thaw() {
	var err error
	if c.v2 {
		err = writeFile(filepath.Join(c.dirs[0].leaf, "cgroup.freeze"), "0")
	} else if d, ok := c.dir(Freezer); ok {
		err = writeFile(filepath.Join(d, "freezer.state"), "THAWED")
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Debug("cgroups: thaw", "err", err)
	}
}

// dir returns the leaf directory of the hierarchy carrying controller ctl.
func (c *Cgroup) dir(ctl string) (string, bool) {
	if c.v2 {
		return c.dirs[0].leaf, true
	}
	for _, d := range c.dirs {
		if slices.Contains(d.controllers, ctl) {
			return d.leaf, true
		}
	}
	return "", false
}

// Stats reads the kernel's accounting. Missing files (an older kernel, a
// hierarchy that is not mounted) leave their fields zero.
func (c *Cgroup) Stats() (Stats, error) {
	var s Stats
	read := func(ctl, file string) []byte {
		d, ok := c.dir(ctl)
		if !ok {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(d, file))
		if err != nil {
			return nil
		}
		return b
	}
	if len(c.dirs) == 0 {
		return s, errNotCreated
	}
	if !exists(c.dirs[0].leaf) {
		return s, fmt.Errorf("cgroups: stats: %s does not exist", c.dirs[0].leaf)
	}
	if c.v2 {
		ev := parseKV(read(Memory, "memory.events"))
		s.OOMKills = ev["oom_kill"]
		s.MemoryPeakBytes, _ = parseUint(read(Memory, "memory.peak"))
		s.CPUUsageUS = parseKV(read(CPU, "cpu.stat"))["usage_usec"]
	} else {
		oc := parseKV(read(Memory, "memory.oom_control"))
		if n, ok := oc["oom_kill"]; ok {
			s.OOMKills = n
		} else if fc, ok := parseUint(read(Memory, "memory.failcnt")); ok && fc > 0 {
			// Before 4.13 v1 did not count OOM kills; hitting the limit
			// (with swap disabled) is the closest signal. Reported as an
			// OOM, never counted.
			s.OOMKilled = true
		}
		s.MemoryPeakBytes, _ = parseUint(read(Memory, "memory.max_usage_in_bytes"))
		if ns, ok := parseUint(read(CPUAcct, "cpuacct.usage")); ok {
			s.CPUUsageUS = ns / 1000
		}
	}
	s.OOMKilled = s.OOMKilled || s.OOMKills > 0
	s.PidsPeak, _ = parseUint(read(Pids, "pids.peak"))
	s.PidsLimitHits = parseKV(read(Pids, "pids.events"))["max"]
	return s, nil
}

// Delete kills whatever is still inside, then removes every directory
// Create made: the sandbox's cgroups (and any sub-cgroups the sandbox made)
// and agentrun's parent when no other sandbox uses it, and finally the
// state record. It is safe to call more than once; after an error it can
// be retried, and Sweep retries it once this process is gone.
func (c *Cgroup) Delete() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil
	}
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	// Fast path: after Kill the directories are empty leaves and one
	// rmdir each does it. EBUSY/ENOTEMPTY means processes or sub-cgroups
	// are left: kill the tree, then remove it bottom-up.
	var busy []cgDir
	for _, d := range c.dirs {
		err := unix.Rmdir(d.leaf)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			busy = append(busy, d)
		}
	}
	var errs []error
	if len(busy) > 0 {
		if err := c.Kill(); err != nil {
			c.log.Warn("cgroups: kill before delete", "id", c.id, "err", err)
		}
		deadline := time.Now().Add(deleteTimeout)
		for _, d := range busy {
			for _, dir := range subdirsDeepestFirst(d.leaf) {
				if err := rmdirRetry(dir, deadline); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cgroups: delete %s: %w", c.id, errors.Join(errs...))
	}
	for _, d := range c.dirs {
		if c.scope != nil {
			break // the parent is the scope's cgroup, which systemd removes
		}
		// Busy or not empty: another sandbox uses it, and the last one
		// out removes it.
		err := unix.Rmdir(d.parent)
		if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.ENOENT) {
			c.log.Debug("cgroups: remove parent", "dir", d.parent, "err", err)
		}
	}
	if c.scope != nil {
		if err := c.scope.stop(c.log.Warn); err != nil {
			return fmt.Errorf("cgroups: delete %s: %w", c.id, err)
		}
	}
	if c.record != "" {
		if err := os.Remove(c.record); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cgroups: delete %s: %w", c.id, err)
		}
	}
	c.deleted = true
	return nil
}

// apply writes the limits. Order matters on v1: memsw may never be below
// the memory limit, and the CFS period is set before the quota it scales.
func (c *Cgroup) apply(l limits) error {
	w := func(ctl, file, val string) error {
		d, ok := c.dir(ctl)
		if !ok {
			return fmt.Errorf("cgroups: no %s hierarchy for %s", ctl, file)
		}
		if err := writeFile(filepath.Join(d, file), val); err != nil {
			return fmt.Errorf("cgroups: set limit: %w", err)
		}
		return nil
	}
	optional := func(err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if c.v2 {
		if l.memory > 0 {
			if err := w(Memory, "memory.max", strconv.FormatInt(l.memory, 10)); err != nil {
				return err
			}
			// Absent when swap accounting is off; then there is no swap
			// to limit through the cgroup.
			if err := optional(w(Memory, "memory.swap.max", "0")); err != nil {
				return err
			}
		}
		if l.pids > 0 {
			if err := w(Pids, "pids.max", strconv.FormatInt(l.pids, 10)); err != nil {
				return err
			}
		}
		if l.cpuQuota > 0 {
			if err := w(CPU, "cpu.max", fmt.Sprintf("%d %d", l.cpuQuota, l.cpuPeriod)); err != nil {
				return err
			}
		}
		return nil
	}
	if l.memory > 0 {
		v := strconv.FormatInt(l.memory, 10)
		if err := w(Memory, "memory.limit_in_bytes", v); err != nil {
			return err
		}
		// memsw is memory+swap: equal to the limit means no swap. Absent
		// without swap accounting (swapaccount=0).
		if err := optional(w(Memory, "memory.memsw.limit_in_bytes", v)); err != nil {
			return err
		}
	}
	if l.pids > 0 {
		if err := w(Pids, "pids.max", strconv.FormatInt(l.pids, 10)); err != nil {
			return err
		}
	}
	if l.cpuQuota > 0 {
		if err := w(CPU, "cpu.cfs_period_us", strconv.FormatUint(l.cpuPeriod, 10)); err != nil {
			return err
		}
		if err := w(CPU, "cpu.cfs_quota_us", strconv.FormatInt(l.cpuQuota, 10)); err != nil {
			return err
		}
	}
	return nil
}
