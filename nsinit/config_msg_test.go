//go:build linux

package nsinit

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestConfigLargerThanSocketBuffer: a config far larger than one
// SOCK_SEQPACKET message may be (a 1 MiB argument list) reaches the Go init
// whole, and a header that lies is refused.
func TestConfigLargerThanSocketBuffer(t *testing.T) {
	pair := func() (*os.File, *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fds[0]), "parent"), os.NewFile(uintptr(fds[1]), "child")
	}
	args := []string{"/bin/true"}
	for range 100000 {
		args = append(args, "0123456789")
	}
	msg, err := json.Marshal(&config{Spec: &specs.Spec{Process: &specs.Process{Args: args}}})
	if err != nil {
		t.Fatal(err)
	}
	parent, child := pair()
	defer parent.Close()
	defer child.Close()
	done := make(chan error, 1)
	go func() { done <- writeConfig(parent, msg) }()
	c, err := readConfig(child)
	if err != nil {
		t.Fatalf("%d-byte config: %v", len(msg), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := c.Spec.Process.Args; len(got) != len(args) || got[len(got)-1] != args[len(args)-1] {
		t.Errorf("got %d args, want %d", len(got), len(args))
	}

	// A header that promises more than arrives: EOF, an error, no hang.
	parent2, child2 := pair()
	defer child2.Close()
	if _, err := parent2.Write([]byte("config 100")); err != nil {
		t.Fatal(err)
	}
	if _, err := parent2.Write([]byte("{}")); err != nil {
		t.Fatal(err)
	}
	parent2.Close()
	if _, err := readConfig(child2); err == nil || !strings.Contains(err.Error(), "read config") {
		t.Errorf("short config: err = %v, want a read config error", err)
	}
}
