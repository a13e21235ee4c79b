package darwin

import (
	"os"
	"syscall"
	"testing"
)

func cloexec(t *testing.T, fd int) bool {
	t.Helper()
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	return flags&syscall.FD_CLOEXEC != 0
}

func TestMarkInheritedCloseOnExec(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd())) // dup clears close-on-exec, like an inherited descriptor
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if cloexec(t, fd) {
		t.Fatal("dup kept close-on-exec; the test cannot show anything")
	}
	if err := MarkInheritedCloseOnExec("/dev/fd"); err != nil {
		t.Fatal(err)
	}
	if !cloexec(t, fd) {
		t.Error("inherited descriptor is still passed on exec")
	}
	if cloexec(t, 0) || cloexec(t, 2) {
		t.Error("stdio must stay inheritable")
	}
	if err := MarkInheritedCloseOnExec("/nonexistent"); err == nil {
		t.Error("an unreadable descriptor list must be an error")
	}
}
