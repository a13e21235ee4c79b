//go:build linux

package agentrun

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/seccomp"
)

// background runs p in a goroutine.
func background(ctx context.Context, p *Policy, opts Options) <-chan ran {
	done := make(chan ran, 1)
	go func() {
		res, err := Run(ctx, p, opts)
		done <- ran{res, err}
	}()
	return done
}

type ran struct {
	res *Result
	err error
}

// skipWithoutSandbox skips when the host cannot build a sandbox at all.
func skipWithoutSandbox(t *testing.T, err error) {
	t.Helper()
	var se *SetupError
	if errors.As(err, &se) && (se.Step == "user namespace" || se.Step == "clone") {
		t.Skipf("no sandbox here: %v", err)
	}
}

// waitReady polls for the command's ready file; a Run that ends first
// fails the test (or skips it where no sandbox can be built). A hang
// guard, not a timing assertion.
func waitReady(t *testing.T, path string, done <-chan ran) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case r := <-done:
			skipWithoutSandbox(t, r.err)
			t.Fatalf("the Run ended before its command was ready: %+v %v", r.res, r.err)
		default:
		}
	}
	t.Fatalf("hang guard: %s never appeared", path)
}

// TestForwardSignals: a signal that reaches this process while a Run with
// ForwardSignals is running reaches the command (whose trap picks the exit
// status), and once Run returns the Go runtime's handler is back: a
// signal.Notify channel gets the next one. Both inits.
func TestForwardSignals(t *testing.T) {
	cache := &seccomp.Cache{}
	for _, b := range []string{nsinit.BackendC, nsinit.BackendGo} {
		t.Run(b, func(t *testing.T) {
			t.Setenv(nsinit.BackendEnv, b)
			ws := t.TempDir()
			p := &Policy{Workspace: ws, Command: []string{"/bin/sh", "-c",
				"trap 'exit 45' USR1; echo > /workspace/ready; while :; do sleep 0.05; done"}}
			done := background(context.Background(), p, Options{SeccompCache: cache, ForwardSignals: []os.Signal{syscall.SIGUSR1}})
			waitReady(t, filepath.Join(ws, "ready"), done)
			if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			var r ran
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("hang guard: the forwarded SIGUSR1 did not end the command")
			}
			if r.err != nil || r.res.ExitCode != 45 {
				t.Fatalf("want exit 45 from the trap, got %+v %v", r.res, r.err)
			}

			ch := make(chan os.Signal, 1)
			signal.Notify(ch, syscall.SIGUSR1)
			defer signal.Stop(ch)
			if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
			case <-time.After(20 * time.Second):
				t.Fatal("hang guard: after Run, SIGUSR1 never reached os/signal: the Go handler was not put back")
			}
		})
	}
}

// TestForwardSignalsOneAtATime: the handlers are process-wide, so a
// second Run that asks for them while one holds them fails with a setup
// error, and so does a Run that sets both ways of forwarding.
func TestForwardSignalsOneAtATime(t *testing.T) {
	cache := &seccomp.Cache{}
	ws := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &Policy{Workspace: ws, Command: []string{"/bin/sh", "-c", "echo > /workspace/ready; exec sleep 60"}}
	done := background(ctx, first, Options{SeccompCache: cache, ForwardSignals: []os.Signal{syscall.SIGUSR2}})
	waitReady(t, filepath.Join(ws, "ready"), done)

	second := &Policy{Workspace: t.TempDir(), Command: []string{"/bin/true"}}
	_, err := Run(context.Background(), second, Options{SeccompCache: cache, ForwardSignals: []os.Signal{syscall.SIGUSR2}})
	if !errors.Is(err, nsinit.ErrForwarding) {
		t.Errorf("a second forwarding Run: %v, want ErrForwarding", err)
	}
	// Without ForwardSignals a concurrent Run is unaffected.
	if res, err := Run(context.Background(), second, Options{SeccompCache: cache}); err != nil || res.ExitCode != 0 {
		t.Errorf("a concurrent Run without forwarding: %+v %v", res, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("hang guard: the first Run did not end on cancel")
	}
	// Released with the first Run's end.
	if res, err := Run(context.Background(), second, Options{SeccompCache: cache, ForwardSignals: []os.Signal{syscall.SIGUSR2}}); err != nil || res.ExitCode != 0 {
		t.Errorf("a forwarding Run after the first ended: %+v %v", res, err)
	}

	sigs := make(chan os.Signal)
	_, err = Run(context.Background(), second, Options{SeccompCache: cache, Signals: sigs, ForwardSignals: []os.Signal{syscall.SIGUSR2}})
	var se *SetupError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "not both") {
		t.Errorf("Signals and ForwardSignals together: %v, want a setup error", err)
	}
}
