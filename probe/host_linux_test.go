//go:build linux

package probe

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestProbeThisHost runs every real check. It asserts only what holds on
// any Linux machine agentrun supports, and logs the report.
func TestProbeThisHost(t *testing.T) {
	r := Probe()
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if r.Kernel.Major < 3 || r.UID != os.Geteuid() {
		t.Fatalf("kernel %+v uid %d", r.Kernel, r.UID)
	}
	if len(r.Namespaces) == 0 {
		t.Fatal("no namespaces found in /proc/self/ns")
	}
	// The syscall probes agree with the kernel version.
	if r.Kernel.AtLeast(5, 3) && !r.Pidfd.Available {
		t.Errorf("kernel %s but pidfd: %+v", r.Kernel.Release, r.Pidfd)
	}
	if r.Kernel.AtLeast(5, 3) && !r.Clone3.Available && !strings.Contains(r.Clone3.Detail, "ENOSYS") {
		t.Errorf("clone3: %+v", r.Clone3)
	}
	if r.Kernel.AtLeast(5, 0) && r.Seccomp.Filter && !r.Seccomp.UserNotif {
		t.Errorf("kernel %s has no user notification: %+v", r.Kernel.Release, r.Seccomp)
	}
	if r.Userns.Available && os.Geteuid() != 0 && r.Userns.Blocker != "" {
		t.Errorf("userns available but a blocker is reported: %+v", r.Userns)
	}
	if r.Userns.Available && UsernsBlocker() != "" && os.Geteuid() != 0 {
		t.Errorf("UsernsBlocker() = %q while user namespaces work", UsernsBlocker())
	}
	if !r.Userns.Available && r.Userns.Blocker == "" {
		t.Errorf("userns unavailable without an explanation: %+v", r.Userns)
	}
	if ok, miss := r.Enforceable(); !ok {
		t.Logf("default policy not enforceable here: %v", miss)
	}
}

// TestThisDevelopmentHost pins the facts of the development machines
// (kernel 6.x, hybrid cgroups, Landlock, unprivileged userns) when run on
// one, and is skipped elsewhere.
func TestThisDevelopmentHost(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/unified"); err != nil {
		t.Skip("not a hybrid development host")
	}
	r := Probe()
	if r.Cgroups.Mode != "hybrid" || r.Cgroups.Driver != "v1" {
		t.Errorf("cgroups: %+v", r.Cgroups)
	}
	if r.Clone3.IntoCgroup {
		t.Errorf("CLONE_INTO_CGROUP claimed on a v1 driver")
	}
	if r.Landlock.ABI < 1 || !r.Seccomp.Filter || !r.Userns.Available || !r.Overlay.Available {
		t.Errorf("%+v", r)
	}
	if ok, miss := r.Enforceable(); !ok {
		t.Errorf("default policy not enforceable on the development host: %v", miss)
	}
	if os.Geteuid() == 0 && (len(r.Cgroups.Root) != 3 || !strings.Contains(r.Cgroups.RootlessDetail, "root-owned")) {
		t.Errorf("cgroups: %+v", r.Cgroups)
	}
	if os.Geteuid() != 0 && (len(r.Cgroups.Rootless) != 0 || !strings.Contains(r.Cgroups.RootlessDetail, "Delegate=yes")) {
		t.Errorf("cgroups: %+v", r.Cgroups)
	}
}
