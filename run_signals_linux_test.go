//go:build linux && cgo

package agentrun

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/seccomp"
)

type ran struct {
	res *Result
	err error
}

// await waits for a background Run (a hang guard, not a timing
// assertion).
func await(t *testing.T, done <-chan ran) ran {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("hang guard: Run did not return")
	}
	return ran{}
}

// expectGoHandler checks that the Go runtime handles sig again: an
// os/signal channel receives it.
func expectGoHandler(t *testing.T, sig syscall.Signal) {
	t.Helper()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig)
	defer signal.Stop(ch)
	if err := syscall.Kill(os.Getpid(), sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("hang guard: after Run, %v never reached os/signal: the Go handler was not put back", sig)
	}
}

// skipWithoutSandbox skips when the host cannot build a sandbox at all.
func skipWithoutSandbox(t *testing.T, err error) {
	t.Helper()
	if noSandbox(err) {
		t.Skipf("no sandbox here: %v", err)
	}
}

// noSandbox: err says the host gives no sandbox at all (no user
// namespace, no clone).
func noSandbox(err error) bool {
	var se *SetupError
	return errors.As(err, &se) && (se.Step == "user namespace" || se.Step == "clone")
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

// forwarding installs a Forwarder for sigs, as the CLI does, and runs p in
// the background with it; the Forwarder is stopped once the run is over.
func forwarding(t *testing.T, ctx context.Context, p *Policy, opts Options, sigs ...syscall.Signal) <-chan ran {
	t.Helper()
	fw, err := nsinit.ForwardSignals(sigs)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan ran, 1)
	go func() {
		res, err := RunWith(ctx, p, opts, Hooks{Forwarder: fw})
		fw.Stop()
		done <- ran{res, err}
	}()
	return done
}

// TestForwardSignals checks that a signal that reaches this process while
// a Run with a Forwarder is running reaches the command (whose trap picks
// the exit status), and that once the Forwarder stops the Go runtime's
// handler is back: a signal.Notify channel gets the next one.
func TestForwardSignals(t *testing.T) {
	cache := &seccomp.Cache{}
	ws := t.TempDir()
	p := &Policy{Workspace: ws, Command: []string{"/bin/sh", "-c",
		"trap 'exit 45' USR1; echo > /workspace/ready; while :; do sleep 0.05; done"}}
	done := forwarding(t, context.Background(), p, Options{SeccompCache: cache}, syscall.SIGUSR1)
	waitReady(t, filepath.Join(ws, "ready"), done)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	r := await(t, done)
	if r.err != nil || r.res.ExitCode != 45 {
		t.Fatalf("want exit 45 from the trap, got %+v %v", r.res, r.err)
	}

	expectGoHandler(t, syscall.SIGUSR1)
}

// TestForwardSignalsHeld checks that a signal that arrives while the
// sandbox is still being built (here: held at StartAfter) neither ends
// this process nor is lost: it reaches the command once it runs, which it
// kills (SIGUSR1's default). Duplicates in the list are merged, and the
// list is put back afterwards.
func TestForwardSignalsHeld(t *testing.T) {
	cache := &seccomp.Cache{}
	ws := t.TempDir()
	p := &Policy{Workspace: ws, Command: []string{"/bin/sh", "-c", "echo > /workspace/ran; sleep 5; exit 0"}}
	gate := make(chan struct{})
	done := forwarding(t, context.Background(), p, Options{SeccompCache: cache, StartAfter: gate},
		syscall.SIGUSR1, syscall.SIGUSR1, syscall.SIGINT, syscall.SIGINT)
	// The forwarder is installed; the build then waits at the gate however
	// long this takes.
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	close(gate)
	r := await(t, done)
	skipWithoutSandbox(t, r.err)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Signal != int(syscall.SIGUSR1) || r.res.ExitCode != 128+int(syscall.SIGUSR1) {
		t.Fatalf("the held SIGUSR1 did not reach the command: %+v", r.res)
	}
	expectGoHandler(t, syscall.SIGINT)
}

// TestForwardSignalsOneAtATime checks that the handlers are process-wide:
// a second Forwarder cannot be installed while one holds them, a Run
// without one is unaffected meanwhile, and the runtime's own signals are
// never taken over.
func TestForwardSignalsOneAtATime(t *testing.T) {
	cache := &seccomp.Cache{}
	ws := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &Policy{Workspace: ws, Command: []string{"/bin/sh", "-c", "echo > /workspace/ready; exec sleep 60"}}
	done := forwarding(t, ctx, first, Options{SeccompCache: cache}, syscall.SIGUSR2)
	waitReady(t, filepath.Join(ws, "ready"), done)

	if _, err := nsinit.ForwardSignals([]syscall.Signal{syscall.SIGUSR2}); !errors.Is(err, nsinit.ErrForwarding) {
		t.Errorf("a second Forwarder: %v, want ErrForwarding", err)
	}
	second := &Policy{Workspace: t.TempDir(), Command: []string{"/bin/true"}}
	if res, err := Run(context.Background(), second, Options{SeccompCache: cache}); err != nil || res.ExitCode != 0 {
		t.Errorf("a concurrent Run without forwarding: %+v %v", res, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("hang guard: the first Run did not end on cancel")
	}
	// Released once the first one stopped.
	if r := await(t, forwarding(t, context.Background(), second, Options{SeccompCache: cache}, syscall.SIGUSR2)); r.err != nil || r.res.ExitCode != 0 {
		t.Errorf("a forwarding Run after the first ended: %+v %v", r.res, r.err)
	}
	// The runtime's own signals stay the runtime's.
	for _, s := range []syscall.Signal{syscall.SIGURG, syscall.SIGSEGV, syscall.SIGCHLD, syscall.SIGKILL} {
		if fw, err := nsinit.ForwardSignals([]syscall.Signal{s}); err == nil {
			fw.Stop()
			t.Errorf("forwarding %v was allowed", s)
		}
	}
}
