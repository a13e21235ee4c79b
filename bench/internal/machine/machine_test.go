package machine

import "testing"

func TestCgroupMode(t *testing.T) {
	cases := map[string]string{
		"hybrid": "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n",
		"v1":     "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\ncgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\n",
		"v2":     "proc /proc proc rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n",
		"none":   "proc /proc proc rw 0 0\n",
	}
	for want, mounts := range cases {
		if got := CgroupMode(mounts); got != want {
			t.Errorf("CgroupMode(%q) = %q, want %q", mounts, got, want)
		}
	}
}

func TestCPUModel(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	if got := cpuModel(info); got != "AMD EPYC 7B13" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := cpuModel(""); got != "unknown" {
		t.Errorf("empty cpuinfo = %q", got)
	}
}
