//go:build linux

package seccomp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetNoNewPrivs sets no_new_privs on the calling thread. The kernel accepts
// a filter from a thread without CAP_SYS_ADMIN only with it set, and
// no_new_privs is per thread: set it on the same locked thread that calls
// Load (or use FlagTSync, which extends it to every thread).
func SetNoNewPrivs() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	return nil
}

// Load installs prog (Program.Filter) with seccomp(SECCOMP_SET_MODE_FILTER)
// and returns the listener fd when flags include FlagNewListener, or -1.
//
// agentrun's sandbox init loads its filter in C (nsinit/internal/cinit);
// Load is for Go programs that confine themselves or a child, and for this
// package's tests, which check a compiled program's decisions in a child.
// A Go caller that loads a filter for a command it starts should:
//
//   - call it on a goroutine locked with runtime.LockOSThread, and start the
//     command from that same thread (syscall.Exec, or os.StartProcess without
//     unlocking): a filter binds the thread that loads it and is inherited by
//     children of that thread. Never unlock the thread afterwards; let it
//     exit with the goroutine so the filtered thread is not reused.
//   - no_new_privs must already be set on that thread (SetNoNewPrivs), or
//     the thread must hold CAP_SYS_ADMIN in its user namespace; otherwise
//     the result is ErrNoNewPrivs. Load does not set it, so that an OCI
//     process with noNewPrivileges=false keeps its semantics.
//   - with FlagTSync the filter covers every thread of the process, which is
//     what a resident init (one that waits for the command) should want, so
//     that no unfiltered thread remains to be hijacked. FlagTSyncESRCH is
//     added automatically when a listener is requested too.
//
// Load makes one system call and, on success, no allocation, so it is safe
// where allocation is unwelcome. It uses no cgo. The listener fd is
// close-on-exec; pass it to the parent (SCM_RIGHTS) and close it in the init
// before the command runs: whoever holds it decides the denied calls.
func Load(prog []byte, flags Flags) (listenerFD int, err error) {
	n := len(prog) / sockFilterSize
	if n == 0 || len(prog)%sockFilterSize != 0 || n > maxInstructions {
		return -1, fmt.Errorf("%w: %d bytes (want a multiple of %d, at most %d instructions)", ErrInvalidProgram, len(prog), sockFilterSize, maxInstructions)
	}
	if flags&FlagTSync != 0 && flags&FlagNewListener != 0 {
		flags |= FlagTSyncESRCH
	}
	fprog := unix.SockFprog{
		Len:    uint16(n),
		Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0])), // the kernel copies it; alignment does not matter
	}
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(flags), uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return -1, loadError(errno, flags)
	}
	if flags&FlagNewListener != 0 {
		return int(r), nil
	}
	if flags&FlagTSync != 0 && r != 0 {
		// Without TSYNC_ESRCH a positive return names a thread that could
		// not be synchronised; nothing was installed.
		return -1, fmt.Errorf("seccomp: TSYNC failed: thread %d has an incompatible filter", r)
	}
	return -1, nil
}

func loadError(errno unix.Errno, flags Flags) error {
	switch {
	case errno == unix.EACCES:
		return fmt.Errorf("%w (%w)", ErrNoNewPrivs, errno)
	case errno == unix.EBUSY && flags&FlagNewListener != 0:
		return fmt.Errorf("%w (%w)", ErrListenerBusy, errno)
	case errno == unix.ESRCH && flags&FlagTSync != 0:
		return fmt.Errorf("seccomp: TSYNC failed: another thread has an incompatible filter: %w", errno)
	case errno == unix.EINVAL:
		return fmt.Errorf("%w: kernel refused it or flags %#x: %w", ErrInvalidProgram, uint32(flags), errno)
	}
	return fmt.Errorf("seccomp: seccomp(SET_MODE_FILTER, %#x): %w", uint32(flags), errno)
}
