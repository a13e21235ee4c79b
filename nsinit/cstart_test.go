//go:build linux && cgo

package nsinit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/mounts"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// testSpec is a small sandbox: all namespaces, /usr and the merged-/usr
// symlinks, proc, a tmpfs /tmp, running argv as an unprivileged uid.
func testSpec(t testing.TB, argv ...string) *specs.Spec {
	uid, gid := os.Geteuid(), os.Getegid()
	hostUID, hostGID := uid, gid
	if uid == 0 {
		uid, gid = 1000, 1000
		hostUID, hostGID = 2147418112, 2147418112
	}
	s := &specs.Spec{
		Hostname: "cinit-test",
		Process: &specs.Process{
			Args:            argv,
			Env:             []string{"PATH=/usr/bin:/bin"},
			Cwd:             "/",
			User:            specs.User{UID: uint32(uid), GID: uint32(gid)},
			NoNewPrivileges: true,
		},
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: uint32(uid), HostID: uint32(hostUID), Size: 1}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: uint32(gid), HostID: uint32(hostGID), Size: 1}},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.UserNamespace}, {Type: specs.MountNamespace}, {Type: specs.PIDNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.IPCNamespace}, {Type: specs.NetworkNamespace},
			},
			MaskedPaths:   []string{"/proc/kcore"},
			ReadonlyPaths: []string{"/proc/sys"},
		},
		Mounts: []specs.Mount{
			{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro", "nosuid", "nodev"}},
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev", "noexec"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=1m"}},
		},
	}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if target, err := os.Readlink(d); err == nil {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: d, Type: mounts.TypeSymlink, Source: target})
		}
	}
	return s
}

type result struct {
	exit           Exit
	stdout, stderr string
	err            error
}

func runSpec(t testing.TB, spec *specs.Spec) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	p, err := Start(&Config{Spec: spec, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return result{err: err}
	}
	exit, err := p.Wait()
	return result{exit: exit, stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// skipWithoutUserns skips where this host or user cannot create the test's
// namespaces at all.
func skipWithoutUserns(t testing.TB) {
	t.Helper()
	r := runSpec(t, testSpec(t, "/bin/true"))
	var se *StepError
	if errors.As(r.err, &se) && (se.Step == "user namespace" || se.Step == "clone") {
		t.Skipf("no sandbox here: %v", r.err)
	}
}

// TestInitOutcomes runs small specs and checks what the command sees and
// how it ends.
func TestInitOutcomes(t *testing.T) {
	skipWithoutUserns(t)
	cases := []struct {
		name string
		argv []string
		// check inspects one backend's result.
		check func(r result) error
	}{
		{"exit status", []string{"/bin/sh", "-c", "exit 7"}, wantExit(7, 0)},
		{"killed by signal", []string{"/bin/sh", "-c", "kill -TERM $$"}, wantExit(128+int(unix.SIGTERM), int(unix.SIGTERM))},
		{"not found", []string{"no-such-command"}, func(r result) error {
			if err := wantExit(127, 0)(r); err != nil {
				return err
			}
			if !strings.Contains(r.stderr, "no-such-command: command not found") {
				return fmt.Errorf("stderr %q lacks the not-found line", r.stderr)
			}
			return nil
		}},
		{"not executable", []string{"/proc/self/status"}, wantExit(126, 0)},
		{"identity and privileges", []string{"/bin/sh", "-c",
			"id -u; hostname; grep -E '^(CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status; ls /proc/self/fd"},
			func(r result) error {
				if err := wantExit(0, 0)(r); err != nil {
					return err
				}
				for _, want := range []string{"cinit-test", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
					"CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
					if !strings.Contains(r.stdout, want) {
						return fmt.Errorf("stdout lacks %q:\n%s", want, r.stdout)
					}
				}
				if strings.HasPrefix(r.stdout, "0\n") {
					return errors.New("the command runs as uid 0")
				}
				// ls itself holds one fd for the directory it lists.
				if fds := strings.Fields(r.stdout[strings.LastIndex(r.stdout, "NoNewPrivs"):])[2:]; len(fds) != 4 {
					return fmt.Errorf("fds %v, want 0 1 2 and ls's own", fds)
				}
				return nil
			}},
		{"pid 1 is init, not the caller", []string{"/bin/sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; echo $$"},
			func(r result) error {
				if err := wantExit(0, 0)(r); err != nil {
					return err
				}
				if !strings.HasPrefix(r.stdout, "agentrun-init") {
					return fmt.Errorf("/proc/1/cmdline is %q", r.stdout)
				}
				return nil
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runSpec(t, testSpec(t, tc.argv...))
			if err := tc.check(r); err != nil {
				t.Errorf("%v (err %v, stderr %q)", err, r.err, r.stderr)
			}
		})
	}
}

func wantExit(code, sig int) func(result) error {
	return func(r result) error {
		if r.err != nil {
			return r.err
		}
		if r.exit.Code != code || r.exit.Signal != sig {
			return fmt.Errorf("exit %+v, want code %d signal %d", r.exit, code, sig)
		}
		return nil
	}
}

// TestCInitSetupError checks that a failing mount comes back as a step
// error naming the mount.
func TestCInitSetupError(t *testing.T) {
	skipWithoutUserns(t)
	spec := testSpec(t, "/bin/true")
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/data", Type: "bind", Source: "/nonexistent/agentrun-test", Options: []string{"rbind", "ro"}})
	r := runSpec(t, spec)
	var se *StepError
	if !errors.As(r.err, &se) || se.Step != "mount /data" || !strings.Contains(se.Msg, "no such file or directory") {
		t.Errorf("error %v, want a step error for mount /data", r.err)
	}
}

// TestCInitSignalForwarding checks that a signal to the sandbox reaches
// the command through PID 1.
func TestCInitSignalForwarding(t *testing.T) {
	skipWithoutUserns(t)
	var stdout lockedBuffer
	spec := testSpec(t, "/bin/sh", "-c", "trap 'echo got-usr1; exit 5' USR1; echo ready; while :; do sleep 0.05; done")
	p, err := Start(&Config{Spec: spec, Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(stdout.String(), "ready") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatalf("signal: %v", err)
	}
	exit, err := p.Wait()
	if err != nil || exit.Code != 5 || !strings.Contains(stdout.String(), "got-usr1") {
		t.Errorf("exit %+v err %v stdout %q, want the trap to run and exit 5", exit, err, stdout.String())
	}
}

// lockedBuffer is a bytes.Buffer that a test may read while the sandbox's
// output is copied into it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// BenchmarkStart measures a whole sandbox (clone, maps, root assembly,
// exec of /bin/true, teardown).
func BenchmarkStart(b *testing.B) {
	skipWithoutUserns(b)
	for i := 0; i < b.N; i++ {
		if r := runSpec(b, testSpec(b, "/bin/true")); r.err != nil || r.exit.Code != 0 {
			b.Fatalf("%+v", r)
		}
	}
}

// BenchmarkIdmapUserns measures obtaining a user namespace fd for an
// idmapped mount (root only) from the C holder.
func BenchmarkIdmapUserns(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("idmapped mounts are prepared by host root only")
	}
	maps := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 2147418112, Size: 1}}
	for i := 0; i < b.N; i++ {
		fd, err := cUserns(maps, maps)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
	}
}

// cgroup2Dir returns a fresh cgroup v2 directory for a test, or skips.
func cgroup2Dir(t *testing.T) string { return cgroupTestDir(t, "cgroup2", "") }

// cgroupTestDir returns a fresh directory in the first mounted hierarchy of
// type fstype (cgroup or cgroup2) whose super options include option (any
// when empty), or skips.
func cgroupTestDir(t *testing.T, fstype, option string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating a cgroup needs root here")
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		i := indexOf(f, "-")
		if i < 0 || i+3 >= len(f) || f[i+1] != fstype || (option != "" && !strings.Contains(","+f[i+3]+",", ","+option+",")) {
			continue
		}
		dir := fmt.Sprintf("%s/agentrun-cinit-test-%d", f[4], os.Getpid())
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Skipf("cannot create a %s directory: %v", fstype, err)
		}
		t.Cleanup(func() { _ = os.Remove(dir) })
		return dir
	}
	t.Skipf("no %s hierarchy %s mounted", fstype, option)
	return ""
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// TestCInitCloneIntoCgroup: with a cgroup v2 fd the C init is cloned
// straight into the cgroup, and the cgroup namespace is rooted there.
func TestCInitCloneIntoCgroup(t *testing.T) {
	skipWithoutUserns(t)
	dir := cgroup2Dir(t)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	spec := testSpec(t, "/bin/sh", "-c", "cat /proc/self/cgroup; read x; exit 0")
	spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	var stdout bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	p, err := Start(&Config{Spec: spec, Stdin: pr, Stdout: &stdout, Cgroup: &CgroupPlacement{FD: fd}})
	pr.Close()
	if err != nil {
		t.Fatal(err)
	}
	procs, err := os.ReadFile(dir + "/cgroup.procs")
	pw.Close()
	exit, werr := p.Wait()
	if err != nil || werr != nil || exit.Code != 0 {
		t.Fatalf("read cgroup.procs: %v; wait: %+v %v", err, exit, werr)
	}
	if !p.inCgroup {
		t.Errorf("clone3 did not place the init (CLONE_INTO_CGROUP fell back)")
	}
	if !strings.Contains(" "+strings.ReplaceAll(string(procs), "\n", " "), " "+fmt.Sprint(p.Pid())+" ") {
		t.Errorf("init %d is not in %s (cgroup.procs: %q)", p.Pid(), dir, procs)
	}
	if !strings.Contains(stdout.String(), "0::/\n") {
		t.Errorf("the sandbox's cgroup namespace is not rooted at its cgroup:\n%s", stdout.String())
	}
}

// TestConcurrentStarts: spawns from many goroutines at once keep their
// stdio, sync sockets and exit statuses apart (each C init is cloned with a
// copy of every fd the process holds at that moment, others' included).
func TestConcurrentStarts(t *testing.T) {
	skipWithoutUserns(t)
	errs := make(chan error, 16)
	for i := 0; i < cap(errs); i++ {
		go func(i int) {
			r := runSpec(t, testSpec(t, "/bin/sh", "-c", fmt.Sprintf("echo out-%d; exit %d", i, i)))
			switch {
			case r.err != nil:
				errs <- r.err
			case r.exit.Code != i || r.stdout != fmt.Sprintf("out-%d\n", i):
				errs <- fmt.Errorf("spawn %d: exit %+v stdout %q", i, r.exit, r.stdout)
			default:
				errs <- nil
			}
		}(i)
	}
	for i := 0; i < cap(errs); i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestNamespacePathRefused checks that the init, which does not join
// existing namespaces, does not quietly create a fresh one instead.
func TestNamespacePathRefused(t *testing.T) {
	spec := testSpec(t, "/bin/true")
	spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: "/proc/1/ns/ipc"})
	_, err := Start(&Config{Spec: spec})
	var se *StepError
	if !errors.As(err, &se) || se.Step != "namespaces" {
		t.Fatalf("want a namespaces step error, got %v", err)
	}
}
