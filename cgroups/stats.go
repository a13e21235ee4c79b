package cgroups

// Stats is what the kernel accounted for a sandbox's cgroup. Read it after
// the sandbox's processes have exited and before Delete: the peaks and
// counters vanish with the directory. Zero means "not provided by this
// kernel" for every field but OOMKilled.
type Stats struct {
	// OOMKilled reports whether the kernel's OOM killer killed a process
	// in the cgroup because of its memory limit.
	OOMKilled bool `json:"oom_killed"`
	// OOMKills counts those kills (v2 memory.events oom_kill, v1
	// memory.oom_control oom_kill).
	OOMKills uint64 `json:"oom_kills,omitempty"`
	// MemoryPeakBytes is the high-water mark of memory use (v2 memory.peak,
	// v1 memory.max_usage_in_bytes).
	MemoryPeakBytes uint64 `json:"memory_peak_bytes,omitempty"`
	// CPUUsageUS is the CPU time used by all processes, user plus system,
	// in microseconds (v2 cpu.stat usage_usec, v1 cpuacct.usage).
	CPUUsageUS uint64 `json:"cpu_usage_us,omitempty"`
	// PidsPeak is the largest number of tasks at once (pids.peak, kernel
	// 6.1+ on both v1 and v2).
	PidsPeak uint64 `json:"pids_peak,omitempty"`
	// PidsLimitHits counts forks refused by pids.max (pids.events max).
	PidsLimitHits uint64 `json:"pids_limit_hits,omitempty"`
}

// Info describes what cgroups offer this caller, for `agentrun probe` and
// for deciding whether to ask for limits at all.
type Info struct {
	Mode Mode `json:"mode"`
	// Driver is "v2" or "v1": which hierarchies carry agentrun's limits.
	Driver string `json:"driver,omitempty"`
	// Available are the controllers the host offers in that driver's
	// hierarchies (v1: mounted; v2: the root's cgroup.controllers).
	Available []string `json:"available"`
	// Usable are the controllers this caller can limit right now.
	Usable []string `json:"usable"`
	// Base is the cgroup under which agentrun's parent would be created.
	Base string `json:"base,omitempty"`
	// Delegated is set for a non-root caller owning a delegated v2 subtree.
	Delegated bool `json:"delegated,omitempty"`
	// Scope is set when a rootless caller's limits go into a transient
	// systemd scope with Delegate=yes, asked of its user manager; Base is
	// then the user manager's cgroup.
	Scope bool `json:"scope,omitempty"`
	// UserManager is the socket of the caller's systemd user manager, when
	// one exists (rootless only).
	UserManager string `json:"user_manager,omitempty"`
	// Kill names how a tree is killed: "cgroup.kill", "freezer" or "signals".
	Kill string `json:"kill,omitempty"`
	// Problem is the one-line reason Usable is short, if it is.
	Problem string `json:"problem,omitempty"`
}
