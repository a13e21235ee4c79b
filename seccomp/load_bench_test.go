//go:build linux && cgo

package seccomp

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkLoad measures installing the compiled default filter with Load,
// separate from compiling it: "default" is the plain filter, "notify" the
// one a spawn loads when it collects violations (denials routed to a
// listener, which Load returns). Each load runs on a fresh OS thread of the
// test process that sets no_new_privs, loads the filter without
// FlagTSync (the filter then binds that thread alone), closes the listener
// and exits: a goroutine locked to its thread takes the thread down when it
// returns, and threads that the runtime starts meanwhile are cloned from a
// clean template thread, not from the filtered one. ns/op is the time of
// the Load call itself; the thread's start and exit are not counted.
func BenchmarkLoad(b *testing.B) {
	notify, err := NotifyOnDeny(DefaultProfile())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		prog func() (*Program, error)
	}{
		{"default", func() (*Program, error) { return Compile(DefaultProfile()) }},
		{"notify", func() (*Program, error) { return Compile(notify) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			prog, err := c.prog()
			if err != nil {
				b.Fatal(err)
			}
			flags := prog.Flags &^ (FlagTSync | FlagTSyncESRCH)
			var total time.Duration
			for i := 0; i < b.N; i++ {
				d, err := loadOnThread(prog.Filter, flags)
				if err != nil {
					b.Fatal(err)
				}
				total += d
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(float64(len(prog.Filter)/sockFilterSize), "insns")
		})
	}
}

// loadOnThread loads filter on a new thread that then exits, and returns
// how long Load took.
func loadOnThread(filter []byte, flags Flags) (time.Duration, error) {
	type result struct {
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the filter stays with this thread, which exits
		// with the goroutine.
		runtime.LockOSThread()
		if err := SetNoNewPrivs(); err != nil {
			done <- result{err: err}
			return
		}
		start := time.Now()
		fd, err := Load(filter, flags)
		d := time.Since(start)
		if fd >= 0 {
			// Without a listener, a notifying rule fails with ENOSYS
			// instead of waiting for an answer nobody would give.
			unix.Close(fd)
		}
		done <- result{d, err}
	}()
	r := <-done
	return r.d, r.err
}
