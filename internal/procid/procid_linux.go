//go:build linux

package procid

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ID identifies a process.
type ID struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	// PidNS is the inode of the PID namespace the pid was read in.
	PidNS uint64 `json:"pidns"`
}

// Self is the calling process.
func Self() (ID, error) { return Of(os.Getpid()) }

// Of reads pid's identity as this process sees it.
func Of(pid int) (ID, error) {
	start, err := StartTime(pid)
	if err != nil {
		return ID{}, err
	}
	ns, err := pidNS()
	if err != nil {
		return ID{}, err
	}
	return ID{PID: pid, Start: start, PidNS: ns}, nil
}

// pidNS is the inode of this process's PID namespace, in which the pids of
// /proc are read.
func pidNS() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, fmt.Errorf("procid: stat /proc/self/ns/pid: %w", err)
	}
	return st.Ino, nil
}

// StartTime is field 22 of /proc/<pid>/stat: when the process started, in
// clock ticks since boot.
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("procid: %w", err)
	}
	return ParseStartTime(b)
}

// Alive reports whether id's process still runs: same pid, same start
// time, not exited. A process of another PID namespace cannot be judged from here;
// Alive reports true for it, so that nothing of it is taken for dead.
func (id ID) Alive() bool {
	ns, err := pidNS()
	if err != nil || ns != id.PidNS {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(id.PID) + "/stat")
	if err != nil {
		return false
	}
	// A zombie has exited: it only waits for its parent (or, for an
	// orphan, the reaper of its PID namespace) to collect it.
	state, start, err := parseStat(b)
	return err == nil && start == id.Start && state != 'Z' && state != 'X'
}

// Judgeable reports whether id's pid is one of this process's PID
// namespace, where Alive can tell.
func (id ID) Judgeable() bool {
	ns, err := pidNS()
	return err == nil && ns == id.PidNS
}

// Pidfd opens a pidfd for id's process, checked to be that process (not
// a later one that got its pid): the check runs after the open, so the
// fd cannot refer to a successor. os.ErrProcessDone when it is gone.
func (id ID) Pidfd() (int, error) {
	if !id.Judgeable() {
		return -1, fmt.Errorf("procid: pid %d is of another PID namespace", id.PID)
	}
	fd, err := unix.PidfdOpen(id.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, os.ErrProcessDone
	}
	if err != nil {
		return -1, fmt.Errorf("procid: pidfd_open %d: %w", id.PID, err)
	}
	if start, err := StartTime(id.PID); err != nil || start != id.Start {
		unix.Close(fd)
		return -1, os.ErrProcessDone
	}
	return fd, nil
}
