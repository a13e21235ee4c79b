//go:build linux

package cgroups

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	// The module's root package only: its parser for /proc/self/cgroup.
	// (It does not build off Linux, hence this file's build tag.)
	containerdcg "github.com/containerd/cgroups/v3"
)

// hierarchy is one mounted cgroup hierarchy as this process sees it.
type hierarchy struct {
	controllers []string // v1 controllers on this mount; nil for v2
	mount       string   // mountpoint
	root        string   // the cgroup the mount shows at its mountpoint
	readOnly    bool
	// caller is the directory of the caller's own cgroup in this hierarchy.
	caller string
	// outside is set when the caller's cgroup is not visible through the
	// mount (a bind-mounted subtree, or a cgroup namespace it is outside of);
	// caller is then the mountpoint.
	outside bool
}

func (h hierarchy) has(c string) bool { return slices.Contains(h.controllers, c) }

// layout is what detectLayout learns about the host, once per Manager.
type layout struct {
	mode Mode
	// v1 holds the hierarchies carrying a controller in v1Wanted, one per
	// mount (co-mounted controllers such as cpu,cpuacct share one).
	v1 []hierarchy
	// v2 is the cgroup2 mount, or nil.
	v2 *hierarchy
	// useV1 selects the driver: v1 whenever a v1 hierarchy carries memory,
	// pids or cpu (hybrid and legacy hosts), otherwise v2.
	useV1 bool
}

// detectLayout derives the mode and the caller's cgroups from the contents
// of /proc/self/mountinfo and /proc/self/cgroup.
func detectLayout(mountinfo, procCgroup []byte) (layout, error) {
	v1Paths, v2Path, err := containerdcg.ParseCgroupFromReaderUnified(bytes.NewReader(procCgroup))
	if err != nil {
		return layout{}, fmt.Errorf("cgroups: parse /proc/self/cgroup: %w", err)
	}
	var lay layout
	anyV1 := false
	var v2Mount *mountEntry
	seen := map[string]bool{} // controller sets already taken, e.g. "cpu,cpuacct"
	for _, e := range parseMountinfo(mountinfo) {
		if e.v2 {
			if v2Mount == nil || preferMount(e, *v2Mount) {
				h := hierarchyFor(e, v2Path)
				lay.v2, v2Mount = &h, &e
			}
			continue
		}
		if len(e.controllers) == 0 {
			continue // named hierarchy (name=systemd): no controllers
		}
		anyV1 = true
		wanted := false
		for _, c := range v1Wanted() {
			wanted = wanted || slices.Contains(e.controllers, c)
		}
		key := strings.Join(e.controllers, ",")
		if !wanted || seen[key] {
			// The same hierarchy mounted twice: keep the first, which is
			// the one /sys/fs/cgroup set up at boot.
			continue
		}
		seen[key] = true
		lay.v1 = append(lay.v1, hierarchyFor(e, v1Paths[e.controllers[0]]))
	}
	for _, h := range lay.v1 {
		if h.has(Memory) || h.has(Pids) || h.has(CPU) {
			lay.useV1 = true
		}
	}
	switch {
	case anyV1 && lay.v2 != nil:
		lay.mode = Hybrid
	case anyV1:
		lay.mode = Legacy
	case lay.v2 != nil:
		lay.mode = Unified
	default:
		lay.mode = Unavailable
	}
	return lay, nil
}

// preferMount picks between two mounts of the cgroup2 hierarchy: the one
// showing the whole tree wins, then the conventional location.
func preferMount(a, b mountEntry) bool {
	if (a.root == "/") != (b.root == "/") {
		return a.root == "/"
	}
	return a.mountpoint == "/sys/fs/cgroup" && b.mountpoint != "/sys/fs/cgroup"
}

// hierarchyFor maps the caller's cgroup path (as /proc/self/cgroup shows it)
// to a directory under the mount.
func hierarchyFor(e mountEntry, cgPath string) hierarchy {
	h := hierarchy{controllers: e.controllers, mount: e.mountpoint, root: e.root, readOnly: e.readOnly}
	rel, ok := relativeTo(e.root, cgPath)
	if !ok {
		h.caller, h.outside = e.mountpoint, true
		return h
	}
	h.caller = path.Join(e.mountpoint, rel)
	return h
}

// relativeTo returns cgPath relative to the mount's root, or false when the
// path lies outside it (including cgroup-namespace paths starting "/..").
func relativeTo(root, cgPath string) (string, bool) {
	if cgPath == "" || !strings.HasPrefix(cgPath, "/") {
		return "", false
	}
	// Checked before Clean, which would turn "/../x" into "/x".
	if cgPath == "/.." || strings.HasPrefix(cgPath, "/../") {
		return "", false
	}
	p := path.Clean(cgPath)
	root = path.Clean(root)
	switch {
	case root == "/":
		return p, true
	case p == root:
		return "/", true
	case strings.HasPrefix(p, root+"/"):
		return p[len(root):], true
	}
	return "", false
}
