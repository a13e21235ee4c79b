//go:build linux

package session_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/session"
	"golang.org/x/sys/unix"
)

// startHolder runs the test binary as a holder of session id and returns
// it with the creator's end of its ready socket and the line it said.
func startHolder(t *testing.T, id, dir string) (*exec.Cmd, *os.File, session.Ready) {
	t.Helper()
	p := &agentrun.Policy{Workspace: shortTemp(t, "ws")}
	host, err := agentrun.NewHostInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := agentrun.CompileSession(p, host)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(session.HolderConfig{ID: id, StateDir: dir, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "ready"), os.NewFile(uintptr(pair[1]), "ready-holder")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=holder")
	cmd.Stdin = bytes.NewReader(cfg)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(mine).ReadBytes('\n')
	if err != nil {
		t.Fatalf("no ready line: %v", err)
	}
	var r session.Ready
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("ready line %q: %v", line, err)
	}
	if !r.OK {
		if bytes.Contains(line, []byte("user namespace")) {
			t.Skipf("no sandbox here: %s", r.Error)
		}
		t.Fatalf("the holder failed: %s", r.Error)
	}
	return cmd, mine, r
}

// TestHolderNeedsAck: a holder whose creator goes away between the ready
// line and its acknowledgement (killed during create) deletes the
// session: nobody was told of it. Positive control: acknowledged, the
// session serves until deleted.
func TestHolderNeedsAck(t *testing.T) {
	dir := shortTemp(t, "st")
	cmd, ready, r := startHolder(t, "unacked", dir)
	ready.Close() // no acknowledgement
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("the unacknowledged holder ended with %v, want exit 1", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the unacknowledged holder still runs")
	}
	if _, err := lifecycle.Load(dir, "unacked"); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Errorf("the record of the unacknowledged session: %v", err)
	}
	if err := unix.Kill(r.Pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("the init %d of the unacknowledged session: %v", r.Pid, err)
	}
	if _, err := os.Lstat(r.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket of the unacknowledged session: %v", err)
	}

	cmd, ready, r = startHolder(t, "acked", dir)
	if _, err := ready.Write([]byte{session.Ack}); err != nil {
		t.Fatal(err)
	}
	ready.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := session.Dial(ctx, r.Socket)
	if err != nil {
		t.Fatalf("the acknowledged session: %v", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the holder after delete: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(r.Socket)); len(ents) != 0 {
		t.Errorf("left in the socket directory: %v", ents)
	}
}
