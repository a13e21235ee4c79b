//go:build linux && cgo

package nsinit

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

// TestConcurrentMixedForks: while C inits are being cloned (with the Go
// heap left out of the clone), other goroutines of the same process fork
// in every way Go does: the Go init (os/exec with CLONE_NEWUSER, which Go
// starts with a plain fork whose child runs Go code on a copy of the
// heap and the goroutine stack) and a caller's own exec in a user
// namespace. None of them may crash or fail.
func TestConcurrentMixedForks(t *testing.T) {
	t.Setenv(BackendEnv, "")
	skipWithoutUserns(t)
	const rounds, per = 4, 8
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 3*per)
		for i := 0; i < per; i++ {
			for _, b := range backends {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					r := runSpec(t, b, testSpec(t, "/bin/sh", "-c", fmt.Sprintf("echo %s-%d; exit %d", b, i, i)))
					if r.err != nil || r.exit.Code != i || r.stdout != fmt.Sprintf("%s-%d\n", b, i) {
						errs <- fmt.Errorf("%s init %d: exit %+v stdout %q err %v", b, i, r.exit, r.stdout, r.err)
					}
				}(i)
			}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("echo own-%d", i))
				cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
				out, err := cmd.Output()
				if err != nil || string(out) != fmt.Sprintf("own-%d\n", i) {
					errs <- fmt.Errorf("the caller's own exec in a user namespace %d: %q %v", i, out, err)
				}
			}(i)
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
