//go:build linux

package nsinit

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// syncPair is a sync socket pair: the parent's end as a file, the
// child's as an fd the caller closes.
func syncPair(t *testing.T) (*os.File, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "parent"), fds[1]
}

// TestReadReportSizes: Process.read sizes its buffer from each packet, so
// a report of any size the socket carries comes back whole (longer than
// 64 KiB too), with the descriptor sent along, and
// a hung-up socket reads as EOF.
func TestReadReportSizes(t *testing.T) {
	parent, child := syncPair(t)
	defer parent.Close()
	if err := unix.SetsockoptInt(child, unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20); err != nil {
		t.Fatal(err)
	}
	p := &Process{sock: parent}
	for _, size := range []int{0, 10, 70 << 10} {
		want := report{Type: repError, Step: "mount /x", Error: strings.Repeat("e", size)}
		msg, _ := json.Marshal(want)
		null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Sendmsg(child, msg, unix.UnixRights(null), nil, 0); err != nil {
			t.Fatalf("send %d bytes: %v", len(msg), err)
		}
		unix.Close(null)
		got, err := p.read()
		if err != nil {
			t.Fatalf("a %d-byte report: %v", len(msg), err)
		}
		if got.Type != want.Type || got.Step != want.Step || got.Error != want.Error {
			t.Errorf("a %d-byte report came back as %q/%q with %d bytes of error", len(msg), got.Type, got.Step, len(got.Error))
		}
		if got.fd < 0 {
			t.Errorf("a %d-byte report lost its descriptor", len(msg))
		} else {
			unix.Close(got.fd)
		}
	}
	unix.Close(child)
	if _, err := p.read(); !errors.Is(err, io.EOF) {
		t.Errorf("a hung-up socket: %v, want EOF", err)
	}
}

// TestReadReportAfterReset: a child that dies right after its clone
// (a failed cgroup placement, say) leaves the parent's release byte unread,
// which makes the kernel report ECONNRESET on the parent's end once the
// child's end is gone, ahead of the report the child queued. The report,
// which says why, must still come back.
func TestReadReportAfterReset(t *testing.T) {
	parent, child := syncPair(t)
	defer parent.Close()
	msg, _ := json.Marshal(report{Type: repError, Step: "cgroup placement", Error: "write tasks: no space left on device"})
	if _, err := unix.Write(child, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Write([]byte{'g'}); err != nil { // never read
		t.Fatal(err)
	}
	unix.Close(child)
	p := &Process{sock: parent}
	r, err := p.read()
	if err != nil || r.Type != repError || r.Step != "cgroup placement" {
		t.Fatalf("got %+v, %v; want the child's cgroup placement report", r, err)
	}
	if _, err := p.read(); !errors.Is(err, io.EOF) {
		t.Errorf("after the report: %v, want EOF", err)
	}
}
