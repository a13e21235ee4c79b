//go:build linux

package seccomp

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kernel structures of the user-notification API (include/uapi/linux/seccomp.h).
// The ioctl numbers encode their sizes (80 and 24 bytes).
type seccompData struct {
	Nr                 int32
	Arch               uint32
	InstructionPointer uint64
	Args               [6]uint64
}

type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Data  seccompData
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// maxEvents bounds the distinct events a Notifier keeps; a command looping
// over new arguments cannot grow the parent without limit.
const maxEvents = 256

// Notifier serves a seccomp listener fd in the parent: every notification
// is recorded as an Event and answered with EPERM, so the sandboxed call
// fails exactly as a plain SCMP_ACT_ERRNO rule would make it fail. It never
// lets a call proceed, so it is not subject to the time-of-check races that
// make user notification unsafe for allow decisions.
//
// A Notifier runs on the Go netpoller (no thread is parked on it) until the
// sandbox is gone (every task using the filter has exited) or Close is
// called.
type Notifier struct {
	prog    *Program
	onEvent func(Event)
	file    *os.File
	done    chan struct{}
	closing atomic.Bool

	mu      sync.Mutex
	events  []Event
	index   map[[2]string]int
	dropped int
	err     error
}

// NewNotifier takes ownership of listenerFD (from Load in the child, passed
// over SCM_RIGHTS) and starts serving it. prog is the program that was
// loaded; it names the syscalls. onEvent, if not nil, is called once for
// each new kind of event (name and detail), from the Notifier's goroutine,
// after the call has been answered; it should return quickly.
func NewNotifier(listenerFD int, prog *Program, onEvent func(Event)) (*Notifier, error) {
	if listenerFD < 0 {
		return nil, fmt.Errorf("seccomp: notifier: invalid listener fd %d", listenerFD)
	}
	// Non-blocking makes os.NewFile register the fd with the netpoller;
	// the listener supports poll (POLLIN: a notification waits, POLLHUP:
	// no task uses the filter any more).
	if err := unix.SetNonblock(listenerFD, true); err != nil {
		return nil, fmt.Errorf("seccomp: notifier: set non-blocking: %w", err)
	}
	n := &Notifier{
		prog:    prog,
		onEvent: onEvent,
		file:    os.NewFile(uintptr(listenerFD), "seccomp-listener"),
		done:    make(chan struct{}),
		index:   map[[2]string]int{},
	}
	rc, err := n.file.SyscallConn()
	if err != nil {
		n.file.Close()
		return nil, fmt.Errorf("seccomp: notifier: %w", err)
	}
	go n.serve(rc)
	return n, nil
}

// Done is closed when the Notifier has stopped: the sandbox's tasks are
// gone, Close was called, or the listener failed (see Close's result).
func (n *Notifier) Done() <-chan struct{} { return n.done }

// Close stops the Notifier and closes the listener. Calls that are denied
// afterwards fail with ENOSYS instead of EPERM, unreported. Close returns
// the error that stopped the Notifier early, if any.
func (n *Notifier) Close() error {
	n.closing.Store(true)
	n.file.Close() // wakes serve; a second Close is harmless
	<-n.done
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Events returns the events recorded so far, in order of first occurrence.
func (n *Notifier) Events() []Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Event(nil), n.events...)
}

// Dropped returns how many denied calls were answered but not recorded
// because maxEvents distinct events were already kept.
func (n *Notifier) Dropped() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dropped
}

type serveState int

const (
	stateWait serveState = iota // nothing pending
	stateGot                    // a notification was received
	stateHup                    // no task uses the filter any more
)

func (n *Notifier) serve(rc interface {
	Read(func(fd uintptr) bool) error
}) {
	defer close(n.done)
	for {
		var req seccompNotif
		state := stateWait
		var ioErr error
		err := rc.Read(func(fd uintptr) bool {
			state, ioErr = receive(fd, &req)
			return state != stateWait || ioErr != nil
		})
		if err != nil {
			if !n.closing.Load() {
				n.fail(fmt.Errorf("seccomp: notifier: wait: %w", err))
			}
			return
		}
		if ioErr != nil {
			n.fail(ioErr)
			return
		}
		if state == stateHup {
			return
		}
		ev, isNew := n.record(&req)
		if err := n.answer(rc, req.ID); err != nil {
			n.fail(err)
			return
		}
		if isNew && n.onEvent != nil {
			n.onEvent(ev)
		}
	}
}

// receive checks the listener without blocking and takes one notification
// if one waits. The kernel counts pending notifications, so after POLLIN
// NOTIF_RECV either returns one or ENOENT (its task was killed meanwhile);
// it never blocks. It polls again after ENOENT rather than going back to the
// edge-triggered netpoller, which would not wake for notifications that
// were already pending.
func receive(fd uintptr, req *seccompNotif) (serveState, error) {
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 0); err != nil {
			if err == unix.EINTR {
				continue
			}
			return stateWait, fmt.Errorf("seccomp: notifier: poll: %w", err)
		}
		switch {
		case pfd[0].Revents&unix.POLLIN != 0:
			*req = seccompNotif{} // the kernel insists on a zeroed buffer
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(req)))
			switch errno {
			case 0:
				return stateGot, nil
			case unix.ENOENT, unix.EINTR:
				continue
			}
			return stateWait, fmt.Errorf("seccomp: notifier: SECCOMP_IOCTL_NOTIF_RECV: %w", errno)
		case pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0:
			return stateHup, nil
		}
		return stateWait, nil
	}
}

func (n *Notifier) answer(rc interface {
	Read(func(fd uintptr) bool) error
}, id uint64) error {
	var sendErr error
	resp := seccompNotifResp{ID: id, Error: -int32(unix.EPERM)}
	err := rc.Read(func(fd uintptr) bool {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
		// ENOENT: the caller was killed or interrupted by a signal, and
		// its call is gone.
		if errno != 0 && errno != unix.ENOENT && errno != unix.EINTR {
			sendErr = fmt.Errorf("seccomp: notifier: SECCOMP_IOCTL_NOTIF_SEND: %w", errno)
		}
		return true
	})
	if err != nil && !n.closing.Load() {
		return fmt.Errorf("seccomp: notifier: answer: %w", err)
	}
	return sendErr
}

func (n *Notifier) record(req *seccompNotif) (Event, bool) {
	name := n.prog.syscallName(req.Data.Arch, req.Data.Nr)
	detail, suggestion := describe(name, req.Data.Args)
	key := [2]string{name, detail}
	n.mu.Lock()
	defer n.mu.Unlock()
	if i, ok := n.index[key]; ok {
		n.events[i].Count++
		return n.events[i], false
	}
	if len(n.events) >= maxEvents {
		n.dropped++
		return Event{}, false
	}
	ev := Event{Name: name, Detail: detail, Suggestion: suggestion, Count: 1, PID: int(req.PID)}
	n.index[key] = len(n.events)
	n.events = append(n.events, ev)
	return ev, true
}

func (n *Notifier) fail(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err == nil {
		n.err = err
	}
}
