//go:build linux

package cgroups

import (
	"slices"
	"testing"
)

// This development host: v1 owns the controllers, cgroup2 at .../unified.
const hybridMountinfo = `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridProcCgroup = `9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/c66
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
`

func TestDetectHybrid(t *testing.T) {
	lay, err := detectLayout([]byte(hybridMountinfo), []byte(hybridProcCgroup))
	if err != nil {
		t.Fatal(err)
	}
	if lay.mode != Hybrid || !lay.useV1 {
		t.Fatalf("mode %s useV1 %v", lay.mode, lay.useV1)
	}
	var got []string
	for _, h := range lay.v1 {
		got = append(got, h.controllers[0]+"="+h.caller)
	}
	want := []string{
		"cpu=/sys/fs/cgroup/cpu",
		"cpuacct=/sys/fs/cgroup/cpuacct",
		"memory=/sys/fs/cgroup/memory/process_api/c66",
		"freezer=/sys/fs/cgroup/freezer",
		"pids=/sys/fs/cgroup/pids",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if lay.v2 == nil || lay.v2.mount != "/sys/fs/cgroup/unified" {
		t.Fatalf("v2 %+v", lay.v2)
	}
}

func TestDetectUnified(t *testing.T) {
	mi := `25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	lay, err := detectLayout([]byte(mi), []byte("0::/user-1000/agentrun-caller\n"))
	if err != nil {
		t.Fatal(err)
	}
	if lay.mode != Unified || lay.useV1 || lay.v2 == nil {
		t.Fatalf("%+v", lay)
	}
	if lay.v2.caller != "/sys/fs/cgroup/user-1000/agentrun-caller" || lay.v2.outside {
		t.Fatalf("%+v", lay.v2)
	}
	// A v1 named hierarchy with no controllers does not make it hybrid
	// for agentrun's purposes... but it is still reported as hybrid.
	mi2 := mi + `26 1 0:23 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd
`
	lay, _ = detectLayout([]byte(mi2), []byte("0::/\n1:name=systemd:/\n"))
	if lay.mode != Unified || lay.useV1 {
		t.Fatalf("named-only v1: %+v", lay)
	}
}

func TestDetectLegacyComounted(t *testing.T) {
	mi := `30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
31 25 0:27 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids
33 25 0:26 / /mnt/again rw - cgroup cgroup rw,cpu,cpuacct
`
	pc := "3:cpu,cpuacct:/a\n2:memory:/b\n1:pids:/c\n"
	lay, err := detectLayout([]byte(mi), []byte(pc))
	if err != nil {
		t.Fatal(err)
	}
	if lay.mode != Legacy || !lay.useV1 || lay.v2 != nil || len(lay.v1) != 3 {
		t.Fatalf("%+v", lay)
	}
	if h := lay.v1[0]; !h.has(CPU) || !h.has(CPUAcct) || h.caller != "/sys/fs/cgroup/cpu,cpuacct/a" {
		t.Fatalf("%+v", h)
	}
	if !lay.v1[2].readOnly {
		t.Fatal("ro mount not noticed")
	}
}

func TestDetectBindMountedSubtree(t *testing.T) {
	// A container without a cgroup namespace: the mount shows only
	// /docker/abc, and the caller is in it or outside it.
	mi := `40 30 0:40 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`
	lay, _ := detectLayout([]byte(mi), []byte("0::/docker/abc/sub\n"))
	if lay.v2.caller != "/sys/fs/cgroup/sub" || lay.v2.outside {
		t.Fatalf("%+v", lay.v2)
	}
	lay, _ = detectLayout([]byte(mi), []byte("0::/elsewhere\n"))
	if lay.v2.caller != "/sys/fs/cgroup" || !lay.v2.outside {
		t.Fatalf("%+v", lay.v2)
	}
	// cgroup namespace: a caller outside the namespace root sees "/..".
	lay, _ = detectLayout([]byte("40 30 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"), []byte("0::/../x\n"))
	if !lay.v2.outside {
		t.Fatalf("%+v", lay.v2)
	}
}

func TestDetectNone(t *testing.T) {
	lay, err := detectLayout([]byte("22 1 0:21 / /proc rw - proc proc rw\n"), nil)
	if err != nil || lay.mode != Unavailable {
		t.Fatalf("%+v %v", lay, err)
	}
	if _, err := detectLayout(nil, []byte("garbage\n")); err == nil {
		t.Fatal("bad /proc/self/cgroup accepted")
	}
}
