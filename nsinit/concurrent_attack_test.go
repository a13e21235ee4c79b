//go:build linux && cgo

package nsinit

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

// TestConcurrentMixedForks checks that while C inits are being cloned
// (with the Go heap left out of the clone), other goroutines of the same
// process may fork as a library user's would: os/exec plainly and with
// CLONE_NEWUSER (which Go starts with a plain fork whose child runs Go
// code on a copy of the heap and the goroutine stack). None of them may
// crash or fail.
func TestConcurrentMixedForks(t *testing.T) {
	skipWithoutUserns(t)
	const rounds, per = 4, 8
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 3*per)
		for i := 0; i < per; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				r := runSpec(t, testSpec(t, "/bin/sh", "-c", fmt.Sprintf("echo init-%d; exit %d", i, i)))
				if r.err != nil || r.exit.Code != i || r.stdout != fmt.Sprintf("init-%d\n", i) {
					errs <- fmt.Errorf("init %d: exit %+v stdout %q err %v", i, r.exit, r.stdout, r.err)
				}
			}(i)
			for _, flags := range []uintptr{0, syscall.CLONE_NEWUSER} {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("echo own-%d", i))
					cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
					out, err := cmd.Output()
					if err != nil || string(out) != fmt.Sprintf("own-%d\n", i) {
						errs <- fmt.Errorf("the caller's own exec (clone flags %#x) %d: %q %v", flags, i, out, err)
					}
				}(i)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		if t.Failed() {
			return
		}
	}
}
