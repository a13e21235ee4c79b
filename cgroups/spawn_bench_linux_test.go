//go:build linux

package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkDefaultCgroup measures the cgroup step of a spawn without
// limits: the sandbox's cgroup with the default pids limit.
//   - create-delete: Create and Delete alone.
//   - self: plus a child placed the way the C init places itself: clone3
//     with CLONE_INTO_CGROUP on v2; on v1 the child writes "0" to each
//     hierarchy's tasks file, which moves the calling thread only.
//   - add: plus a child placed by the parent with Add (its pid written to
//     cgroup.procs while it waits), the v2 fallback when clone3 is refused.
//     On v1 this migration takes the global thread-group lock and waits for
//     an RCU grace period.
//
// The child exits at once and is reaped before Delete, so Delete finds the
// cgroup as a finished sandbox leaves it; "self" and "add" therefore also
// include a fork-style clone of this process and its exit. The parent
// cgroup is this process's own and goes with the last sandbox cgroup.
func BenchmarkDefaultCgroup(b *testing.B) {
	m, err := NewManager(Options{StateDir: b.TempDir(), Parent: fmt.Sprintf("agentrun-bench-%d", os.Getpid())})
	if err != nil {
		b.Fatal(err)
	}
	res := resourcesFor(limits{pids: DefaultPidsLimit})
	if err := m.Check(res); err != nil {
		b.Skipf("cgroups not usable here: %v", err)
	}
	for _, mode := range []string{"create-delete", "self", "add"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cg, err := m.Create("bench-"+strconv.Itoa(i), res)
				if err != nil {
					b.Fatal(err)
				}
				if mode != "create-delete" {
					err = placeChild(cg, mode == "add")
				}
				if derr := cg.Delete(); err == nil {
					err = derr
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cloneArgs is struct clone_args up to the cgroup field (CLONE_ARGS_SIZE_VER2).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

// placeChild starts a child in cg, lets it exit and reaps it. The child is
// a fork-style clone of this process that makes raw system calls only.
// With add the parent places it with Add while the child waits on a pipe;
// otherwise it is placed as the C init places itself.
func placeChild(cg *Cgroup, add bool) error {
	var tasks []int
	if !add && !cg.V2() {
		for _, dir := range cg.Paths() {
			fd, err := unix.Open(filepath.Join(dir, "tasks"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				closeAll(tasks)
				return err
			}
			tasks = append(tasks, fd)
		}
	}
	defer closeAll(tasks)
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	zero := []byte("0")
	args := cloneArgs{exitSignal: uint64(unix.SIGCHLD)}
	if fd := cg.FD(); fd >= 0 && !add {
		args.flags, args.cgroup = unix.CLONE_INTO_CGROUP, uint64(fd)
	}
	pid, _, errno := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0)
	if errno != 0 {
		closeAll(pipe[:])
		return fmt.Errorf("clone3: %w", errno)
	}
	if pid == 0 {
		code := uintptr(0)
		for _, fd := range tasks {
			if n, _, _ := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&zero[0])), 1); n != 1 {
				code = 1
			}
		}
		// Wait for the parent's Add: EOF once it closes the write end.
		unix.RawSyscall(unix.SYS_CLOSE, uintptr(pipe[1]), 0, 0)
		unix.RawSyscall(unix.SYS_READ, uintptr(pipe[0]), uintptr(unsafe.Pointer(&zero[0])), 1)
		unix.RawSyscall(unix.SYS_EXIT_GROUP, code, 0, 0)
	}
	unix.Close(pipe[0])
	var addErr error
	if add {
		addErr = cg.Add(int(pid))
	}
	unix.Close(pipe[1])
	var ws unix.WaitStatus
	var err error
	for {
		_, err = unix.Wait4(int(pid), &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case addErr != nil:
		return addErr
	case err != nil:
		return fmt.Errorf("wait: %w", err)
	case !ws.Exited() || ws.ExitStatus() != 0:
		return fmt.Errorf("child could not join the cgroup (status %#x)", ws)
	}
	return nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
