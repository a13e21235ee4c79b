package cgroups

import (
	"fmt"
	"math"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Controller names as the kernel spells them.
const (
	Memory  = "memory"
	Pids    = "pids"
	CPU     = "cpu"
	CPUAcct = "cpuacct" // v1 only: CPU usage accounting
	Freezer = "freezer" // v1 only: stop the tree before killing it
)

// DefaultPidsLimit is a sane pids.max for a sandbox that asked for no limit:
// high enough for parallel builds (threads count), low enough that a fork
// bomb cannot take the host's pid space.
const DefaultPidsLimit = 4096

// DefaultCPUPeriod is the CFS period used when only a quota is given (µs).
const DefaultCPUPeriod uint64 = 100_000

// CPUQuota converts a number of CPUs (0.5, 2) into a CFS quota over
// DefaultCPUPeriod, both in microseconds. cpus <= 0 gives quota -1 (no limit).
func CPUQuota(cpus float64) (quota int64, period uint64) {
	if cpus <= 0 || math.IsNaN(cpus) || math.IsInf(cpus, 0) {
		return -1, DefaultCPUPeriod
	}
	q := math.Round(cpus * float64(DefaultCPUPeriod))
	if q < 1000 { // the kernel's minimum quota is 1 ms
		q = 1000
	}
	if q > math.MaxInt64/2 {
		q = math.MaxInt64 / 2
	}
	return int64(q), DefaultCPUPeriod
}

// limits are the enforced subset of specs.LinuxResources, normalised.
// Zero means "not set".
type limits struct {
	memory    int64  // bytes
	pids      int64  // tasks
	cpuQuota  int64  // µs per period
	cpuPeriod uint64 // µs
}

// parseLimits extracts what this package enforces. OCI conventions: a nil
// pointer, 0 or -1 means "no limit".
func parseLimits(res *specs.LinuxResources) (limits, error) {
	var l limits
	if res == nil {
		return l, nil
	}
	if m := res.Memory; m != nil && m.Limit != nil && *m.Limit != 0 && *m.Limit != -1 {
		if *m.Limit < 0 {
			return l, fmt.Errorf("cgroups: invalid memory limit %d", *m.Limit)
		}
		l.memory = *m.Limit
	}
	if p := res.Pids; p != nil && p.Limit != nil && *p.Limit != 0 && *p.Limit != -1 {
		if *p.Limit < 0 {
			return l, fmt.Errorf("cgroups: invalid pids limit %d", *p.Limit)
		}
		l.pids = *p.Limit
	}
	if c := res.CPU; c != nil && c.Quota != nil && *c.Quota != 0 && *c.Quota != -1 {
		q := *c.Quota
		period := DefaultCPUPeriod
		if c.Period != nil && *c.Period != 0 {
			period = *c.Period
		}
		// Kernel bounds: quota >= 1 ms, 1 ms <= period <= 1 s.
		if q < 1000 {
			return l, fmt.Errorf("cgroups: invalid cpu quota %dµs (minimum 1000)", q)
		}
		if period < 1000 || period > 1_000_000 {
			return l, fmt.Errorf("cgroups: invalid cpu period %dµs (1000..1000000)", period)
		}
		l.cpuQuota, l.cpuPeriod = q, period
	}
	return l, nil
}

// required lists the controllers the limits need.
func (l limits) required() []string {
	var c []string
	if l.memory > 0 {
		c = append(c, Memory)
	}
	if l.pids > 0 {
		c = append(c, Pids)
	}
	if l.cpuQuota > 0 {
		c = append(c, CPU)
	}
	return c
}

// Unsupported names the fields of res that are set but that this package
// does not enforce, so a caller can refuse or warn instead of silently
// running with weaker limits. Memory.Swap is listed only when it asks for
// swap beyond the memory limit: swap is always disabled.
func Unsupported(res *specs.LinuxResources) []string {
	if res == nil {
		return nil
	}
	var u []string
	add := func(set bool, name string) {
		if set {
			u = append(u, name)
		}
	}
	add(len(res.Devices) > 0, "devices")
	if m := res.Memory; m != nil {
		add(m.Reservation != nil, "memory.reservation")
		add(m.Swap != nil && *m.Swap > 0 && (m.Limit == nil || *m.Swap > *m.Limit), "memory.swap")
		//lint:ignore SA1019 read only to report the field as not enforced
		add(m.Kernel != nil, "memory.kernel")
		add(m.KernelTCP != nil, "memory.kernelTCP")
		add(m.Swappiness != nil, "memory.swappiness")
		add(m.DisableOOMKiller != nil && *m.DisableOOMKiller, "memory.disableOOMKiller")
	}
	if c := res.CPU; c != nil {
		add(c.Shares != nil, "cpu.shares")
		add(c.Burst != nil, "cpu.burst")
		add(c.RealtimeRuntime != nil, "cpu.realtimeRuntime")
		add(c.RealtimePeriod != nil, "cpu.realtimePeriod")
		add(c.Cpus != "", "cpu.cpus")
		add(c.Mems != "", "cpu.mems")
		add(c.Idle != nil, "cpu.idle")
	}
	add(res.BlockIO != nil, "blockIO")
	add(len(res.HugepageLimits) > 0, "hugepageLimits")
	add(res.Network != nil, "network")
	add(len(res.Rdma) > 0, "rdma")
	add(len(res.Unified) > 0, "unified")
	return u
}

// validID accepts names that are safe as one path element and readable in
// ps/systemd output.
func validID(id string) error {
	if id == "" || len(id) > 128 || id[0] == '.' || id[0] == '-' {
		return fmt.Errorf("cgroups: invalid id %q (1-128 characters of [A-Za-z0-9_.-], not starting with '.' or '-')", id)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-'
		if !ok {
			return fmt.Errorf("cgroups: invalid id %q (1-128 characters of [A-Za-z0-9_.-], not starting with '.' or '-')", id)
		}
	}
	return nil
}
