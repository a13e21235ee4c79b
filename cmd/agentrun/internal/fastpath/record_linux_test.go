//go:build linux && cgo

package fastpath

import (
	"strings"
	"testing"
)

// TestExpressRecordCgroupLine: the record names either the cgroup recipe
// or "no-cgroup" with the state directory, never a mix; express.c refuses
// any other line, and a record that cannot be written is not written.
func TestExpressRecordCgroupLine(t *testing.T) {
	release := make([]byte, 4+8)
	withCg := Express{Signals: []int{2}, StateDir: "/run/agentrun/cgroups", CgroupParent: "agentrun", CgroupDir: "/sys/fs/cgroup/pids/agentrun", PidsMax: 24}
	noCg := Express{Signals: []int{2}, StateDir: "/run/user/1000/agentrun/cgroups", NoCgroup: true, Fingerprints: []string{"A\t/sys/fs/cgroup/pids\t13"}}
	for _, tc := range []struct {
		name string
		x    Express
		line string // the line after "signals", or "" when no record may be written
	}{
		{"cgroup", withCg, "cgroup\t/run/agentrun/cgroups\tagentrun\t/sys/fs/cgroup/pids/agentrun\t24"},
		{"no cgroup", noCg, "no-cgroup\t/run/user/1000/agentrun/cgroups"},
		{"no cgroup with a limit", func() Express { x := noCg; x.PidsMax = 24; return x }(), ""},
		{"no cgroup with a cgroup dir", func() Express { x := noCg; x.CgroupDir = "/sys/fs/cgroup/pids/agentrun"; return x }(), ""},
		{"no cgroup, relative state dir", func() Express { x := noCg; x.StateDir = "agentrun/cgroups"; return x }(), ""},
		{"cgroup without a limit", func() Express { x := withCg; x.PidsMax = 0; return x }(), ""},
		{"no signals", func() Express { x := noCg; x.Signals = nil; return x }(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := expressRecord(0x1234, release, &tc.x)
			if tc.line == "" {
				if rec != nil {
					t.Fatalf("wrote a record:\n%s", rec)
				}
				return
			}
			lines := strings.Split(string(rec), "\n")
			if len(lines) < 6 || lines[3] != tc.line || !strings.HasPrefix(lines[4], "release ") || lines[len(lines)-2] != "end" {
				t.Fatalf("record:\n%s\nwant line 4 %q", rec, tc.line)
			}
			for _, f := range tc.x.Fingerprints {
				if !strings.Contains(string(rec), "\n"+f+"\n") {
					t.Errorf("fingerprint %q missing from:\n%s", f, rec)
				}
			}
		})
	}
}
