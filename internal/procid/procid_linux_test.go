//go:build linux

package procid

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestParseStartTime(t *testing.T) {
	line := "123 (a) b (c) S 1 123 123 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 100"
	if got, err := ParseStartTime([]byte(line)); err != nil || got != 98765 {
		t.Fatalf("ParseStartTime = %d, %v; want 98765", got, err)
	}
	for _, bad := range []string{"", "123 (a", "123 (a) S 1 2"} {
		if _, err := ParseStartTime([]byte(bad)); err == nil {
			t.Errorf("ParseStartTime(%q) succeeded", bad)
		}
	}
}

// TestAliveAndPidfd checks that a process is alive under its own
// identity, and that one with its pid but another start time (a reused
// pid) is neither alive nor reachable through Pidfd.
func TestAliveAndPidfd(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if !self.Alive() {
		t.Fatal("this process is not alive under its own identity")
	}
	fd, err := self.Pidfd()
	if err != nil {
		t.Fatal(err)
	}
	os.NewFile(uintptr(fd), "pidfd").Close()

	reused := self
	reused.Start++
	if reused.Alive() {
		t.Error("a reused pid counts as the old process")
	}
	if _, err := reused.Pidfd(); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Pidfd of a reused pid: %v, want os.ErrProcessDone", err)
	}

	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := ID{PID: cmd.Process.Pid, Start: 1, PidNS: self.PidNS}
	if gone.Alive() {
		t.Error("a reaped process is alive")
	}
	other := ID{PID: 1, Start: 1, PidNS: self.PidNS + 1}
	if !other.Alive() || other.Judgeable() {
		t.Error("a process of another PID namespace must count as alive and not judgeable")
	}
}
