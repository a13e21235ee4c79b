//go:build linux

package nsinit

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
)

// ErrForwarding is returned when another Forwarder of this program is
// installed.
var ErrForwarding = errors.New("nsinit: this process already forwards its signals to a sandbox")

// forwardable are the signals a Forwarder may take over: those the init
// passes on to the command (cinit.c). The runtime's own
// (SIGURG, SIGPROF, SIGCHLD, SIGPIPE, the faults) and job control stay.
var forwardable = [...]syscall.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
	syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGALRM,
}

// A Forwarder takes over signals that reach this process and sends them
// on to one sandbox's init (Config.Forwarder). Signals that arrive before
// the command has started are held and sent then, once each and in
// signal number order (as the kernel merges pending signals); they are
// dropped if the command never starts. Those that arrive after the init
// has exited are swallowed. Stop hands the signals back.
//
// It replaces the Go runtime's handlers with C ones: no
// os/signal thread and no hand-off to it per signal hooked. They are
// process-wide, so one Forwarder is installed at a time. While it is,
// os/signal channels of the same signals get nothing, and a
// signal.Ignore or Reset of them is undone by Stop.
type Forwarder struct {
	mu       sync.Mutex
	impl     forwarding
	attached bool
	stopped  bool
}

// forwarding is the build's mechanism (sigfwd_*_linux.go).
type forwarding interface {
	// attach sends held and later signals to pidfd (pid when it is -1)
	// or through send.
	attach(pidfd, pid int, send func(syscall.Signal) error)
	// detach swallows later signals; once it returns no handler uses
	// the target any more (send may still be called once: it refuses
	// a reaped init).
	detach()
	uninstall()
}

// ForwardSignals installs a Forwarder for sigs (duplicates are merged).
// The caller must Stop it.
func ForwardSignals(sigs []syscall.Signal) (*Forwarder, error) {
	var uniq []syscall.Signal
	for _, s := range sigs {
		if !slices.Contains(forwardable[:], s) {
			return nil, fmt.Errorf("nsinit: cannot forward %v: only %v", s, forwardable)
		}
		if !slices.Contains(uniq, s) {
			uniq = append(uniq, s)
		}
	}
	if len(uniq) == 0 {
		return nil, errors.New("nsinit: no signals to forward")
	}
	impl, err := installForwarding(uniq)
	if err != nil {
		return nil, err
	}
	return &Forwarder{impl: impl}, nil
}

// Stop hands the signals back to the Go runtime. Idempotent, and a nil
// Forwarder's does nothing.
func (f *Forwarder) Stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.impl.uninstall()
		f.stopped = true
	}
}

// attach points the Forwarder at its init; only once.
func (f *Forwarder) attach(pidfd, pid int, send func(syscall.Signal) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped && !f.attached {
		f.impl.attach(pidfd, pid, send)
		f.attached = true
	}
}

// detach ends the forwarding to the init it was attached to.
func (f *Forwarder) detach() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped && f.attached {
		f.impl.detach()
	}
}
