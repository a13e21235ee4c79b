package cgroups

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
)

// Mode is how the host arranges its cgroup hierarchies.
type Mode string

const (
	// Unified means only cgroup v2 carries controllers.
	Unified Mode = "unified"
	// Hybrid means v1 hierarchies carry the controllers and a cgroup2
	// tree is also mounted (usually at /sys/fs/cgroup/unified, often
	// without any controller). agentrun uses the v1 hierarchies there, as
	// runc does.
	Hybrid Mode = "hybrid"
	// Legacy means only v1 hierarchies are mounted.
	Legacy Mode = "legacy"
	// Unavailable means no cgroup filesystem is mounted.
	Unavailable Mode = "unavailable"
)

// v1Wanted are the v1 controllers whose hierarchies a sandbox joins: the
// three that carry limits, cpuacct for CPU time and freezer for killing.
// (A function, not a var: the package keeps no mutable state.)
func v1Wanted() [5]string { return [...]string{Memory, Pids, CPU, CPUAcct, Freezer} }

// mountEntry is one cgroup or cgroup2 line of /proc/self/mountinfo.
type mountEntry struct {
	mountpoint  string
	root        string   // the subtree of the hierarchy this mount shows
	v2          bool     // fstype cgroup2
	controllers []string // v1: controllers bound to the hierarchy
	readOnly    bool
}

// parseMountinfo returns the cgroup mounts in mountinfo order.
func parseMountinfo(data []byte) []mountEntry {
	var out []mountEntry
	for line := range bytes.Lines(data) {
		f := strings.Fields(string(line))
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		e := mountEntry{
			mountpoint: unescapeMountinfo(f[4]),
			root:       unescapeMountinfo(f[3]),
			v2:         fstype == "cgroup2",
		}
		for _, o := range strings.Split(f[5], ",") {
			if o == "ro" {
				e.readOnly = true
			}
		}
		if !e.v2 {
			for _, o := range strings.Split(f[sep+3], ",") {
				switch {
				case o == "rw" || o == "ro" || strings.HasPrefix(o, "name=") ||
					strings.Contains(o, "=") || o == "noprefix" || o == "xattr" ||
					o == "clone_children" || o == "cpuset_v2_mode" || o == "none":
				default:
					e.controllers = append(e.controllers, o)
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// unescapeMountinfo undoes the kernel's octal escaping of ' ', '\t', '\n'
// and '\\' in mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseKV parses "key value" lines (memory.events, cpu.stat,
// memory.oom_control, cgroup.events). Unparsable values are skipped.
func parseKV(data []byte) map[string]uint64 {
	m := map[string]uint64{}
	for line := range bytes.Lines(data) {
		k, v, ok := strings.Cut(strings.TrimSpace(string(line)), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}

// parseUint parses a single-number cgroup file ("12345\n"); "max" is
// reported as not ok.
func parseUint(data []byte) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil
}

// parsePids parses cgroup.procs.
func parsePids(data []byte) []int {
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	return pids
}
