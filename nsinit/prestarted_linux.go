//go:build linux

package nsinit

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Exe identifies the binary a plan image was written by: a new build
// invalidates every image.
type Exe struct{ Dev, Ino, Size, CtimeSec, CtimeNsec uint64 }

// Prestarted is what a program did for this spawn before its Go runtime
// started (the agentrun CLI's constructor, cmd/agentrun/internal/fastpath):
// it started an init from a plan image an earlier spawn cached, or found
// no usable image.
type Prestarted struct {
	// Started says an init runs: Pid, Sock (the parent's end of its sync
	// socket) and Image, the image it was started from, as read.
	// Otherwise there was no usable image.
	Started   bool
	Pid, Sock int
	Image     []byte
	// Argv is the command the init was given: the command line after its
	// first "--".
	Argv []string
	// Key and Exe are what this spawn's image must carry.
	Key []byte
	Exe Exe
}

// Discard kills an init that is not to be adopted and closes its socket.
// It is reaped off the caller's path: its namespaces are torn down in its
// exit, before it can be reaped (about a millisecond of mounts here), and
// the caller has no use for it after.
func (pre Prestarted) Discard() {
	if !pre.Started {
		return
	}
	_ = unix.Kill(pre.Pid, unix.SIGKILL)
	_ = unix.Close(pre.Sock)
	go func() {
		for {
			if _, err := unix.Wait4(pre.Pid, nil, 0, nil); !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
}

// Prestart is a program's fast path as Start sees it (Config.Prestart):
// an init started before the Go runtime, to be adopted when the plan Start
// compiles is byte for byte the image it was started from, and the cache
// of images that the next spawn's start comes from.
type Prestart interface {
	// Take returns what the program did for this spawn; ok is false when
	// it did nothing (not its spawn, turned off, or taken already).
	Take() (pre Prestarted, ok bool)
	// Cache stores image, this spawn's plan, for the next spawn with the
	// same key. Start calls it only when that spawn's init can be adopted.
	Cache(image []byte)
	// Forget drops what is cached for this spawn's key: inits started
	// from it can never be adopted.
	Forget()
	// Adopted says the adopted init's command runs; release is the
	// message it was released with.
	Adopted(release []byte)
}
