//go:build linux && cgo

package nsinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/agentrun/agentrun/nsinit/internal/cinit"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// cloneCases are the namespace sets of BenchmarkClone. Every set but
// "none" includes the user namespace, which an unprivileged caller needs
// for any other, so a namespace's own share is its row minus "user".
var cloneCases = []struct {
	name  string
	flags uint64
}{
	{"none", 0},
	{"user", unix.CLONE_NEWUSER},
	{"user+mount", unix.CLONE_NEWUSER | unix.CLONE_NEWNS},
	{"user+pid", unix.CLONE_NEWUSER | unix.CLONE_NEWPID},
	{"user+net", unix.CLONE_NEWUSER | unix.CLONE_NEWNET},
	{"user+uts", unix.CLONE_NEWUSER | unix.CLONE_NEWUTS},
	{"user+ipc", unix.CLONE_NEWUSER | unix.CLONE_NEWIPC},
	{"user+cgroup", unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP},
	{"all", unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP},
}

// BenchmarkClone measures the clone step alone, through the C init's own
// clone (cinit.Start): clone3 into the namespaces, the child's start (it
// drops its copy of the parent's memory and resets Go's signal handlers),
// the parent's id-map writes, then the child's exit at its first sync read
// and the parent's wait4, which includes the synchronous part of the
// namespace teardown. No mount, no exec, no seccomp, no cgroup. The
// kernel finishes a network namespace's teardown later on a workqueue, so
// part of its cost lands on the next iterations, as it does between
// spawns. In the real spawn the cgroup namespace is unshared by the child
// after its release; here it is a clone flag like the others.
func BenchmarkClone(b *testing.B) {
	skipWithoutUserns(b)
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(null)
	// The same identity and maps as a real sandbox of this caller.
	spec := testSpec(b, "/bin/true")
	for _, c := range cloneCases {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := cloneOnce(c.flags, spec, null); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cloneOnce clones one C init with flags, writes its id maps when it has
// a user namespace, lets it exit and reaps it.
func cloneOnce(flags uint64, spec *specs.Spec, null int) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	plan := &cinit.Plan{
		CloneFlags: flags,
		CgroupFD:   -1,
		FDs:        []int{null, null, null, fds[1]},
		SyncFD:     syncFD,
		UID:        spec.Process.User.UID,
		GID:        spec.Process.User.GID,
		ExpectPPID: -1,
		Cwd:        "/",
		Argv:       spec.Process.Args,
	}
	// The child's parent death signal follows the cloning thread, which
	// must therefore outlive it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := cinit.Start(plan)
	unix.Close(fds[1])
	if err != nil {
		unix.Close(fds[0])
		return fmt.Errorf("clone %#x: %w", flags, err)
	}
	var mapErr error
	if flags&unix.CLONE_NEWUSER != 0 {
		mapErr = writeIDMaps(pid, spec.Linux, os.Geteuid() != 0)
	}
	// EOF on the sync socket before the go-ahead byte: the child exits.
	unix.Close(fds[0])
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case mapErr != nil:
		return fmt.Errorf("id maps: %w", mapErr)
	case err != nil:
		return fmt.Errorf("wait: %w", err)
	case !ws.Exited() || ws.ExitStatus() != cinit.ExitSetupFailed:
		return fmt.Errorf("child ended with %#x, want exit %d (no go-ahead)", ws, cinit.ExitSetupFailed)
	}
	return nil
}
