//go:build linux

package lifecycle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func ptr[T any](v T) *T { return &v }

// TestDefaultPidsLimit: the sandbox cgroup gets the default pids limit
// when the spec says nothing about pids, next to other limits too, and a
// spec that asks for "unlimited" (-1 or 0, as OCI bundles may) keeps it.
func TestDefaultPidsLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates sandbox cgroups")
	}
	mem := int64(64 << 20)
	for _, tc := range []struct {
		name string
		pids *specs.LinuxPids
		want string
	}{
		{"unset", nil, "4096"},
		{"unset-limit", &specs.LinuxPids{}, "4096"},
		{"unlimited", &specs.LinuxPids{Limit: ptr(int64(-1))}, "max"},
		{"zero", &specs.LinuxPids{Limit: ptr(int64(0))}, "max"},
		{"set", &specs.LinuxPids{Limit: ptr(int64(99))}, "99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &mem}, Pids: tc.pids}}}
			cg, _, err := sandboxCgroup(spec, false)
			if err != nil {
				t.Fatal(err)
			}
			defer cg.Delete()
			got := ""
			for _, p := range cg.Paths() {
				if b, err := os.ReadFile(filepath.Join(p, "pids.max")); err == nil {
					got = strings.TrimSpace(string(b))
				}
			}
			if got != tc.want {
				t.Errorf("pids.max %q, want %q (paths %v)", got, tc.want, cg.Paths())
			}
		})
	}
}
