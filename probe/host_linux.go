//go:build linux

package probe

import (
	"errors"
	"os"
	"syscall"
	"unsafe"

	"github.com/agentrun/agentrun/cgroups"
	"golang.org/x/sys/unix"
)

// Probe inspects this host for this process.
func Probe() Report { return Run(HostEnv()) }

// HostEnv is the real Env of this process.
func HostEnv() Env {
	return Env{
		FS:                 os.DirFS("/"),
		Euid:               os.Geteuid(),
		Uname:              uname,
		TryUserns:          tryUserns,
		SeccompActionAvail: seccompActionAvail,
		LandlockABI:        landlockABI,
		PidfdOpenSelf:      pidfdOpenSelf,
		Clone3:             clone3Probe,
		Cgroups:            cgroupInfo,
	}
}

func uname() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// tryUserns clones a child into a new user namespace. The child then execs
// a path that cannot exist: ENOENT from exec proves the clone worked,
// without running any program or needing one to be installed. (A Go
// process cannot unshare(CLONE_NEWUSER) itself: it is multithreaded.)
func tryUserns() error {
	p, err := os.StartProcess("/nonexistent/agentrun-probe-userns", []string{"probe"}, &os.ProcAttr{
		Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER},
	})
	if err == nil {
		// Cannot happen; reap it anyway.
		p.Kill()
		p.Wait()
		return nil
	}
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func seccompActionAvail(action uint32) error {
	a := action
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&a)))
	if errno != 0 {
		return errno
	}
	return nil
}

func landlockABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}

func pidfdOpenSelf() error {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// clone3Probe calls clone3 with no argument structure: the kernel rejects
// a size below CLONE_ARGS_SIZE_VER0 with EINVAL before doing anything, so
// no process can result; ENOSYS means no clone3 (or a filter hiding it).
func clone3Probe() error {
	_, _, errno := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return errors.New("clone3 with no arguments succeeded")
}

func cgroupInfo() (cgroups.Info, error) {
	m, err := cgroups.NewManager(cgroups.Options{})
	if err != nil {
		return cgroups.Info{}, err
	}
	return m.Info(), nil
}
