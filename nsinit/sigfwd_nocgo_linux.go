//go:build linux && !cgo

package nsinit

import (
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

// notifyForwarding uses os/signal: without cgo there are no handlers of
// our own. os/signal delivers to every channel, so this build has no
// one-at-a-time limit.
type notifyForwarding struct {
	ch   chan os.Signal
	done chan struct{}

	mu      sync.Mutex
	send    func(syscall.Signal) error // nil: hold (before attach) or swallow (after detach)
	held    []syscall.Signal
	flushed chan struct{} // signals the loop to send what is held
}

func installForwarding(sigs []syscall.Signal) (forwarding, error) {
	f := &notifyForwarding{ch: make(chan os.Signal, 8), done: make(chan struct{}), flushed: make(chan struct{}, 1)}
	hook := make([]os.Signal, len(sigs))
	for i, s := range sigs {
		hook[i] = s
	}
	signal.Notify(f.ch, hook...)
	go f.loop()
	return f, nil
}

func (f *notifyForwarding) loop() {
	for {
		var pending []syscall.Signal
		select {
		case <-f.done:
			return
		case s := <-f.ch:
			pending = []syscall.Signal{s.(syscall.Signal)}
		case <-f.flushed:
		}
		f.mu.Lock()
		send := f.send
		if send == nil {
			for _, s := range pending {
				if !slices.Contains(f.held, s) {
					f.held = append(f.held, s)
				}
			}
			pending = nil
		} else {
			pending = append(f.held, pending...)
			f.held = nil
		}
		f.mu.Unlock()
		for _, s := range pending {
			_ = send(s)
		}
	}
}

func (f *notifyForwarding) attach(_, _ int, send func(syscall.Signal) error) {
	f.mu.Lock()
	f.send = send
	f.mu.Unlock()
	select {
	case f.flushed <- struct{}{}:
	default:
	}
}

// detach stops handing signals to send; one already handed over may still
// be sent after it returns, which Process.Signal refuses once the init is
// marked reaped. (Waiting for it here would deadlock: markReaped holds the
// lock that Process.Signal takes.)
func (f *notifyForwarding) detach() {
	f.mu.Lock()
	f.send = nil
	f.held = nil
	f.mu.Unlock()
}

func (f *notifyForwarding) uninstall() {
	signal.Stop(f.ch)
	close(f.done)
}
