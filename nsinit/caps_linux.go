//go:build linux

package nsinit

import (
	"errors"
	"fmt"

	"github.com/agentrun/agentrun/internal/capnames"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// dropPrivileges runs on the locked thread that will fork the command. It
// empties the ambient and bounding sets and sets no_new_privs. The command
// runs as a uid that is not root in the user namespace, so execve clears
// the permitted and effective sets as well; nothing can be regained through
// setuid binaries or file capabilities because of no_new_privs.
func dropPrivileges(proc *specs.Process) error {
	keep := keptCaps(proc)
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; ; c++ {
		if keep[c] {
			continue
		}
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
	// Only what --cap-add asked for survives: in permitted, effective and
	// inheritable here, and raised as ambient so it crosses the command's
	// execve (its uid is not root in the namespace).
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for c := range keep {
		data[c/32].Permitted |= 1 << (c % 32)
	}
	for i := range data {
		data[i].Effective, data[i].Inheritable = data[i].Permitted, data[i].Permitted
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("set capability sets: %w", err)
	}
	for c := range keep {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
			return fmt.Errorf("raise ambient capability %d: %w", c, err)
		}
	}
	return nil
}

// keptCaps are the capability numbers the Spec grants the command.
func keptCaps(proc *specs.Process) map[int]bool {
	keep := map[int]bool{}
	if proc.Capabilities == nil {
		return keep
	}
	for _, n := range proc.Capabilities.Ambient {
		if c := capnames.Number(n); c >= 0 {
			keep[c] = true
		}
	}
	return keep
}
