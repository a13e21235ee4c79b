//go:build linux && !cgo

package nsinit

import (
	"os"
	"os/signal"
	"syscall"
)

// forwardSignals hooks sigs with os/signal (without cgo there are no
// handlers of our own) and sends them on with Signal. os/signal delivers
// to every channel, so this build has no one-at-a-time limit.
func forwardSignals(p *Process, _ int, sigs []syscall.Signal) (func(), error) {
	ch := make(chan os.Signal, 8)
	hook := make([]os.Signal, len(sigs))
	for i, s := range sigs {
		hook[i] = s
	}
	signal.Notify(ch, hook...)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				_ = p.Signal(s.(syscall.Signal))
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}, nil
}
