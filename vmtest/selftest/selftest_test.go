//go:build linux

// Package selftest checks the vmtest harness itself: that the VM it boots
// offers pure cgroup v2 with the controllers agentrun needs, that tests run
// as the uid the harness promises, and that the unprivileged user really owns
// a delegated subtree. It skips outside the VM (VMTEST unset).
//
// Build and run it with:
//
//	go test -c -o vmtest/work/selftest.test ./vmtest/selftest
//	vmtest/run.sh vmtest/work/selftest.test
package selftest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

const (
	cgroupRoot        = "/sys/fs/cgroup"
	cgroup2SuperMagic = 0x63677270
)

func inVM(t *testing.T) {
	t.Helper()
	if os.Getenv("VMTEST") != "1" {
		t.Skip("not inside the vmtest VM (VMTEST unset); run through vmtest/run.sh")
	}
}

// TestInjectedFailure lets the harness's failure path be demonstrated:
// VMTEST_SELFTEST_FAIL=1 (passed with run.sh --env) makes it fail.
func TestInjectedFailure(t *testing.T) {
	inVM(t)
	if os.Getenv("VMTEST_SELFTEST_FAIL") == "1" {
		t.Fatal("failing on purpose: VMTEST_SELFTEST_FAIL=1")
	}
}

func TestPureCgroupV2(t *testing.T) {
	inVM(t)
	var st syscall.Statfs_t
	if err := syscall.Statfs(cgroupRoot, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != cgroup2SuperMagic {
		t.Fatalf("%s has fs magic %#x, want cgroup2 %#x", cgroupRoot, st.Type, cgroup2SuperMagic)
	}
	// On a pure v2 host /proc/self/cgroup has exactly one line, "0::PATH".
	self := readFile(t, "/proc/self/cgroup")
	lines := strings.Split(strings.TrimSpace(self), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "0::") {
		t.Fatalf("/proc/self/cgroup is not pure v2:\n%s", self)
	}
	// No v1 hierarchy may be mounted anywhere.
	for _, l := range strings.Split(readFile(t, "/proc/self/mountinfo"), "\n") {
		if strings.Contains(l, " - cgroup ") {
			t.Errorf("cgroup v1 mount present: %s", l)
		}
	}
	ctrls := strings.Fields(readFile(t, filepath.Join(cgroupRoot, "cgroup.controllers")))
	for _, want := range []string{"memory", "pids", "cpu"} {
		if !contains(ctrls, want) {
			t.Errorf("cgroup.controllers = %v, missing %q", ctrls, want)
		}
	}
}

func TestIdentity(t *testing.T) {
	inVM(t)
	want, err := strconv.Atoi(os.Getenv("VMTEST_UID"))
	if err != nil {
		t.Fatalf("VMTEST_UID=%q: %v", os.Getenv("VMTEST_UID"), err)
	}
	if uid, euid := os.Getuid(), os.Geteuid(); uid != want || euid != want {
		t.Fatalf("uid=%d euid=%d, want %d", uid, euid, want)
	}
	if gid := os.Getgid(); gid != want {
		t.Errorf("gid=%d, want %d", gid, want)
	}
	capEff := statusField(t, "CapEff")
	if want != 0 && capEff != "0000000000000000" {
		t.Errorf("unprivileged run has effective capabilities %s", capEff)
	}
	if want == 0 && capEff == "0000000000000000" {
		t.Errorf("root run has no effective capabilities")
	}
	if _, err := os.Stat(os.Getenv("AGENTRUN_BIN")); os.Getenv("AGENTRUN_BIN") != "" && err != nil {
		t.Errorf("AGENTRUN_BIN: %v", err)
	}
}

func TestCgroupAccess(t *testing.T) {
	inVM(t)
	mode := os.Getenv("VMTEST_MODE")
	own := ownCgroup(t)
	if env := os.Getenv("VMTEST_CGROUP"); env != own {
		t.Errorf("VMTEST_CGROUP=%q but /proc/self/cgroup says %q", env, own)
	}
	switch mode {
	case "root":
		testRootCgroup(t)
	case "user":
		testDelegated(t, own)
	case "user-systemd":
		// Not delegated, but a user manager that can hand out scopes.
		if err := os.Mkdir(filepath.Join(own, "child"), 0o755); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("mkdir in vmtest.service's cgroup: err=%v, want EACCES", err)
		}
		sock := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "systemd", "private")
		if fi, err := os.Stat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
			t.Fatalf("no systemd user manager socket at %s: %v", sock, err)
		}
	case "user-nodeleg":
		err := os.Mkdir(filepath.Join(own, "child"), 0o755)
		if !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("mkdir in a non-delegated cgroup: err=%v, want EACCES", err)
		}
		err = os.Mkdir(filepath.Join(cgroupRoot, "child"), 0o755)
		if !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("mkdir in the root cgroup: err=%v, want EACCES", err)
		}
	default:
		t.Fatalf("unknown VMTEST_MODE %q", mode)
	}
}

// testRootCgroup creates a child of the root cgroup with a memory limit and
// removes it again.
func testRootCgroup(t *testing.T) {
	dir := filepath.Join(cgroupRoot, fmt.Sprintf("vmtest-selftest-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer rmdir(t, dir)
	writeFile(t, filepath.Join(dir, "memory.max"), "64M")
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "memory.max"))); got != "67108864" {
		t.Errorf("memory.max = %q, want 67108864", got)
	}
	writeFile(t, filepath.Join(dir, "pids.max"), "64")
	writeFile(t, filepath.Join(dir, "cpu.max"), "50000 100000")
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "cpu.max"))); got != "50000 100000" {
		t.Errorf("cpu.max = %q", got)
	}
}

// testDelegated walks the path a rootless runtime takes in a delegated
// cgroup that holds its own process (like a systemd scope with
// Delegate=yes): move out of the way into a leaf, enable controllers for the
// subtree, create a limited child, then undo everything.
func testDelegated(t *testing.T, own string) {
	if own != filepath.Join(cgroupRoot, "user-1000") {
		t.Fatalf("running in %s, want the delegated %s/user-1000", own, cgroupRoot)
	}
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(own, f), &st); err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != os.Getuid() {
			t.Errorf("%s/%s owned by uid %d, want %d", own, f, st.Uid, os.Getuid())
		}
	}
	if _, err := os.Stat(filepath.Join(own, "cgroup.kill")); err != nil {
		t.Errorf("cgroup.kill: %v", err)
	}
	ctrls := strings.Fields(readFile(t, filepath.Join(own, "cgroup.controllers")))
	for _, want := range []string{"memory", "pids", "cpu"} {
		if !contains(ctrls, want) {
			t.Errorf("delegated cgroup.controllers = %v, missing %q", ctrls, want)
		}
	}

	leaf := filepath.Join(own, "leaf")
	if err := os.Mkdir(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	defer rmdir(t, leaf)
	writeFile(t, filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid()))
	defer writeFile(t, filepath.Join(own, "cgroup.procs"), strconv.Itoa(os.Getpid()))

	writeFile(t, filepath.Join(own, "cgroup.subtree_control"), "+memory +pids +cpu")
	defer writeFile(t, filepath.Join(own, "cgroup.subtree_control"), "-memory -pids -cpu")

	sandbox := filepath.Join(own, "sandbox")
	if err := os.Mkdir(sandbox, 0o755); err != nil {
		t.Fatal(err)
	}
	defer rmdir(t, sandbox)
	writeFile(t, filepath.Join(sandbox, "memory.max"), "64M")
	writeFile(t, filepath.Join(sandbox, "pids.max"), "64")
	writeFile(t, filepath.Join(sandbox, "cpu.max"), "50000 100000")
	if got := strings.TrimSpace(readFile(t, filepath.Join(sandbox, "memory.max"))); got != "67108864" {
		t.Errorf("memory.max = %q, want 67108864", got)
	}
	// The root cgroup itself stays out of reach.
	if err := os.Mkdir(filepath.Join(cgroupRoot, "escape"), 0o755); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("mkdir in the root cgroup: err=%v, want EACCES", err)
	}
}

func ownCgroup(t *testing.T) string {
	t.Helper()
	line := strings.TrimSpace(readFile(t, "/proc/self/cgroup"))
	return filepath.Join(cgroupRoot, strings.TrimPrefix(line, "0::"))
}

func statusField(t *testing.T, name string) string {
	t.Helper()
	for _, l := range strings.Split(readFile(t, "/proc/self/status"), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/self/status", name)
	return ""
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0); err != nil {
		t.Errorf("write %q to %s: %v", data, path, err)
	}
}

func rmdir(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Rmdir(path); err != nil {
		t.Errorf("rmdir %s: %v", path, err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
