//go:build linux

package mounts_test

// The benchmarks here assemble roots and pivot into them, which must never
// happen to the test process's own mount namespace. They run in a helper:
// the test binary re-executed in fresh user, mount, PID, UTS, IPC and
// network namespaces (as a sandbox init is). For each operation the helper
// starts a goroutine locked to a fresh OS thread, which unshares a mount
// namespace of its own (a copy of the helper's, as a sandbox's is a copy
// of the host's), runs the step, times it and exits: a locked goroutine
// that exits takes its thread down, and with it the thread's root and its
// mount namespace. The helper replies with the step's time, which becomes
// ns/op; starting the helper, the unshare and the thread's exit are not
// counted.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/mounts"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

const envHelper = "AGENTRUN_MOUNTS_BENCH_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) == "1" {
		os.Exit(helperMain(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// BenchmarkSetup measures mounts.Setup building the default policy's root
// (the Go init's root assembly: every bind, copy, symlink, /proc, /dev,
// tmpfs, mask and read-only path, then the pivot). The "mounts" metric is
// the number of mounts the thread's namespace holds afterwards.
func BenchmarkSetup(b *testing.B) {
	p := &agentrun.Policy{Workspace: b.TempDir(), Command: []string{"/bin/true"}}
	host, err := agentrun.NewHostInfo(p)
	if err != nil {
		b.Fatal(err)
	}
	spec, err := agentrun.Compile(p, host)
	if err != nil {
		b.Fatal(err)
	}
	benchHelper(b, spec, "setup")
}

// BenchmarkPivot measures the pivot step of Setup alone: chdir into a
// fresh tmpfs root, pivot_root, detach the old root (a copy of every host
// mount) and remount the new root read-only.
func BenchmarkPivot(b *testing.B) {
	benchHelper(b, &specs.Spec{}, "pivot")
}

// benchHelper runs op b.N times in a helper and reports the helper's
// timings as ns/op.
func benchHelper(b *testing.B, spec *specs.Spec, op string) {
	h, err := startHelper(spec)
	if err != nil {
		b.Skipf("needs user namespaces (unprivileged user namespaces or root): %v", err)
	}
	defer func() {
		if err := h.close(); err != nil {
			b.Errorf("helper: %v", err)
		}
	}()
	var total time.Duration
	var count int
	for i := 0; i < b.N; i++ {
		d, n, err := h.do(op)
		if err != nil {
			b.Fatal(err)
		}
		total += d
		count = n
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
	if count > 0 {
		b.ReportMetric(float64(count), "mounts")
	}
}

type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startHelper(spec *specs.Spec) (*helper, error) {
	cfg, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), envHelper+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &helper{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if _, err := in.Write(append(cfg, '\n')); err != nil {
		_ = h.close()
		return nil, err
	}
	return h, nil
}

// do runs one op and returns the helper's time for it and the mount count.
func (h *helper) do(op string) (time.Duration, int, error) {
	if _, err := io.WriteString(h.in, op+"\n"); err != nil {
		return 0, 0, fmt.Errorf("helper gone: %w", err)
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		return 0, 0, fmt.Errorf("helper gone: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ok" {
		return 0, 0, fmt.Errorf("%s: %s", op, strings.TrimSpace(line))
	}
	ns, err1 := strconv.ParseInt(f[1], 10, 64)
	n, err2 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("helper reply %q: %w", line, err)
	}
	return time.Duration(ns), n, nil
}

// close ends the helper (EOF on its input) and waits for it.
func (h *helper) close() error {
	h.in.Close()
	return h.cmd.Wait()
}

// helperMain serves ops: the first input line is the spec, then one op per
// line; each reply is "ok NS MOUNTS" or "error MSG".
func helperMain(r io.Reader, w io.Writer) int {
	in := bufio.NewReader(r)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return 1
	}
	var spec specs.Spec
	if err := json.Unmarshal(line, &spec); err != nil {
		fmt.Fprintln(w, "error decode spec:", err)
		return 1
	}
	for {
		op, err := in.ReadString('\n')
		if err != nil {
			return 0
		}
		type result struct {
			d   time.Duration
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			// Never unlocked: the thread carries a private mount namespace
			// and root, and exits with this goroutine.
			runtime.LockOSThread()
			d, n, err := runOp(strings.TrimSpace(op), &spec)
			done <- result{d, n, err}
		}()
		res := <-done
		if res.err != nil {
			fmt.Fprintln(w, "error", res.err)
			continue
		}
		fmt.Fprintln(w, "ok", res.d.Nanoseconds(), res.n)
	}
}

// runOp runs on a locked thread that it gives a mount namespace of its own.
func runOp(op string, spec *specs.Spec) (time.Duration, int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return 0, 0, fmt.Errorf("unshare mount namespace: %w", err)
	}
	switch op {
	case "setup":
		start := time.Now()
		err := mounts.Setup(spec, nil)
		d := time.Since(start)
		if err != nil {
			return 0, 0, err
		}
		n, err := countMounts()
		return d, n, err
	case "pivot":
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return 0, 0, fmt.Errorf("make-rprivate: %w", err)
		}
		if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
			return 0, 0, fmt.Errorf("tmpfs: %w", err)
		}
		rootfd, err := unix.Open("/tmp", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, 0, err
		}
		defer unix.Close(rootfd)
		start := time.Now()
		err = mounts.Pivot(rootfd, true)
		return time.Since(start), 0, err
	}
	return 0, 0, fmt.Errorf("unknown op %q", op)
}

// countMounts counts the mounts of the calling thread's namespace, through
// the /proc that Setup mounted.
func countMounts() (int, error) {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), "\n"), nil
}
