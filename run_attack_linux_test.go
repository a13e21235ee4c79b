//go:build linux

package agentrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// procsWith lists the host pids whose command line contains marker.
func procsWith(marker string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// withoutPIDNamespace drops the PID namespace from spec, as an OCI bundle
// may, and the /proc mount a fresh PID namespace would need.
func withoutPIDNamespace(spec *specs.Spec) {
	var nss []specs.LinuxNamespace
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type != specs.PIDNamespace {
			nss = append(nss, ns)
		}
	}
	spec.Linux.Namespaces = nss
	var ms []specs.Mount
	for _, m := range spec.Mounts {
		if m.Destination != "/proc" {
			ms = append(ms, m)
		}
	}
	spec.Mounts = ms
	spec.Linux.MaskedPaths, spec.Linux.ReadonlyPaths = nil, nil
}

// mustCompile compiles p against this host.
func mustCompile(t *testing.T, p *Policy) *specs.Spec {
	t.Helper()
	h, err := NewHostInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Compile(p, h)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// mustRunSpec runs spec, skips the test where the host gives no sandbox and
// fails it on any other error.
func mustRunSpec(t *testing.T, spec *specs.Spec, opt Options) *Result {
	t.Helper()
	res, err := RunSpec(context.Background(), spec, 0, opt, time.Now())
	skipWithoutSandbox(t, err)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRunSpecKillsDaemons: whatever the command leaves running is gone when
// RunSpec returns, with a PID namespace (the kernel takes the namespace
// down with init) and without one (an OCI-style spec: only the cgroup kill
// reaches a daemonized grandchild).
func TestRunSpecKillsDaemons(t *testing.T) {
	cache := &seccomp.Cache{}
	for _, pidns := range []bool{true, false} {
		t.Run(fmt.Sprintf("pidns=%v", pidns), func(t *testing.T) {
			marker := fmt.Sprintf("%d.%06d", 900+time.Now().Nanosecond()%90, time.Now().UnixNano()%1000000)
			p := &Policy{Workspace: t.TempDir(), Command: []string{"/bin/sh", "-c",
				"setsid sleep " + marker + " </dev/null >/dev/null 2>&1 & sleep 0.2; exit 0"}}
			spec := mustCompile(t, p)
			if !pidns {
				withoutPIDNamespace(spec)
			}
			res := mustRunSpec(t, spec, Options{SeccompCache: cache})
			if res.ExitCode != 0 {
				t.Fatalf("the launching shell: exit %d %s", res.ExitCode, res.Error)
			}
			if !pidns && res.Limits == "" {
				// Pre-existing: without a cgroup nothing reaches a
				// daemon outside a PID namespace.
				t.Skip("no cgroup for the sandbox here, so nothing can take the tree down without a PID namespace")
			}
			if left := procsWith(marker); len(left) > 0 {
				t.Errorf("the daemonized sleep %s survived the sandbox (pids %v)", marker, left)
				for _, pid := range left {
					if p, err := os.FindProcess(atoi(pid)); err == nil {
						_ = p.Kill()
					}
				}
			}
		})
	}
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// TestStartAfter: the command does not start while Options.StartAfter is
// open (the CLI hooks its signal forwarding meanwhile), it starts once it
// is closed, and a context that ends first ends the spawn with nothing
// run.
func TestStartAfter(t *testing.T) {
	cache := &seccomp.Cache{}
	ws := t.TempDir()
	p := &Policy{Workspace: ws, Command: []string{"/bin/sh", "-c", "echo ran > /workspace/ran"}}
	gate := make(chan struct{})
	type ran struct {
		res *Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(context.Background(), p, Options{SeccompCache: cache, StartAfter: gate})
		done <- ran{res, err}
	}()
	// Not a timing assertion: however long the gate stays shut,
	// nothing may run (the hang guard below is generous).
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Fatal("the command ran while StartAfter was open")
	}
	select {
	case r := <-done:
		t.Fatalf("Run returned while StartAfter was open: %+v %v", r.res, r.err)
	default:
	}
	close(gate)
	var r ran
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("hang guard: Run did not return after StartAfter closed")
	}
	skipWithoutSandbox(t, r.err)
	if r.err != nil || r.res.ExitCode != 0 {
		t.Fatalf("after the gate: %+v %v", r.res, r.err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "ran")); err != nil || string(b) != "ran\n" {
		t.Fatalf("the command did not run after the gate: %q %v", b, err)
	}

	// A context that ends while the gate is shut: an error, and
	// nothing ran.
	ws2 := t.TempDir()
	p2 := &Policy{Workspace: ws2, Command: []string{"/bin/sh", "-c", "echo ran > /workspace/ran"}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if res, err := Run(ctx, p2, Options{SeccompCache: cache, StartAfter: make(chan struct{})}); err == nil {
		t.Fatalf("Run with a shut gate and an ended context succeeded: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(ws2, "ran")); err == nil {
		t.Fatal("the command ran although the gate never opened")
	}
}

// TestSkipViolations: with Options.SkipViolations the filter denies by
// itself: the denied call still fails with EPERM and the workspace write
// beside it lands, nothing is reported, and the status says so; without
// it the same call is reported.
func TestSkipViolations(t *testing.T) {
	cache := &seccomp.Cache{}
	for _, skip := range []bool{true, false} {
		t.Run(fmt.Sprintf("skip=%v", skip), func(t *testing.T) {
			ws := t.TempDir()
			p := &Policy{Workspace: ws, Command: []string{"/bin/sh", "-c",
				"echo ok > /workspace/ok; touch f && chmod 4755 f; echo $? > /workspace/rc"}}
			var seen []Violation
			opts := Options{SeccompCache: cache, SkipViolations: skip}
			if !skip {
				opts.OnViolation = func(v Violation) { seen = append(seen, v) }
			}
			res, err := Run(context.Background(), p, opts)
			skipWithoutSandbox(t, err)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "ok")); err != nil || string(b) != "ok\n" {
				t.Fatalf("positive control: workspace write %q %v", b, err)
			}
			if b, _ := os.ReadFile(filepath.Join(ws, "rc")); string(b) != "1\n" {
				t.Fatalf("chmod 4755 exited %q, want 1 (denied)", b)
			}
			if fi, err := os.Stat(filepath.Join(ws, "f")); err != nil || fi.Mode()&os.ModeSetuid != 0 {
				t.Fatalf("the setuid bit landed: %v %v", fi.Mode(), err)
			}
			want, wantN := "collected", 1
			if skip {
				want, wantN = "skipped", 0
			}
			if res.ViolationsStatus != want || len(res.Violations) != wantN || len(seen) != wantN {
				t.Fatalf("status %q, violations %+v, seen %+v; want %q and %d", res.ViolationsStatus, res.Violations, seen, want, wantN)
			}
		})
	}
}

// TestRunSpecSysfsShowsSandboxNetwork checks that a spec that mounts
// sysfs sees the sandbox's network devices in it (lo alone), never the
// host's. The init makes the network namespace in a second thread while
// it builds the root, but not for such a spec: sysfs takes the network
// namespace of the thread that mounts it, and a user namespace may mount
// it only from a network namespace of its own.
func TestRunSpecSysfsShowsSandboxNetwork(t *testing.T) {
	ws := t.TempDir()
	p := &Policy{Workspace: ws, Command: []string{"/bin/sh", "-c", "ls /sys/class/net > /workspace/net"}}
	spec := mustCompile(t, p)
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs",
		Options: []string{"nosuid", "noexec", "nodev", "ro"}})
	res, err := RunSpec(context.Background(), spec, 0, Options{SeccompCache: &seccomp.Cache{}}, time.Now())
	if noSandbox(err) {
		t.Skipf("no sandbox here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("ls /sys/class/net: exit %d %s", res.ExitCode, res.Error)
	}
	out, err := os.ReadFile(filepath.Join(ws, "net"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(out)); len(got) != 1 || got[0] != "lo" {
		t.Errorf("SANDBOX ESCAPE: sysfs in the sandbox lists the network devices %q, not lo alone", got)
	}
}
