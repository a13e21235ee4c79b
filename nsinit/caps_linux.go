//go:build linux

package nsinit

import (
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// dropPrivileges runs on the locked thread that will fork the command. It
// empties the ambient and bounding sets and sets no_new_privs. The command
// runs as a uid that is not root in the user namespace, so execve clears
// the permitted and effective sets as well; nothing can be regained through
// setuid binaries or file capabilities because of no_new_privs.
func dropPrivileges(proc *specs.Process) error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if proc.NoNewPrivileges {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	if proc.User.UID == 0 {
		// Root in the namespace would keep its capabilities over execve.
		return errors.New("refusing to run the command as uid 0 of the sandbox")
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capability sets: %w", err)
	}
	return nil
}
