//go:build linux

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair with plain ioctls. The slave is put
// in non-canonical mode with echo on: injected input then shows up at once
// in the slave's input queue (TIOCINQ) and, echoed, on the master.
func openPTY(t *testing.T) (master, slave *os.File, n uint32) {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals on this host: %v", err)
	}
	master = os.NewFile(uintptr(mfd), "ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("TIOCSPTLCK: %v", err)
	}
	n, err = unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("TIOCGPTN: %v", err)
	}
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/pts/%d: %v", n, err)
	}
	slave = os.NewFile(uintptr(sfd), fmt.Sprintf("/dev/pts/%d", n))
	t.Cleanup(func() { slave.Close() })
	tio, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
	if err != nil {
		t.Fatalf("TCGETS: %v", err)
	}
	tio.Lflag &^= unix.ICANON
	tio.Lflag |= unix.ECHO
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 0, 0
	if err := unix.IoctlSetTermios(sfd, unix.TCSETS, tio); err != nil {
		t.Fatalf("TCSETS: %v", err)
	}
	return master, slave, n
}

// pending reports the bytes waiting in the slave's input queue and what the
// master can read (echoes), without blocking.
func pending(t *testing.T, master, slave *os.File, settle time.Duration) (int, string) {
	t.Helper()
	inq, err := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCINQ)
	if err != nil {
		t.Fatalf("TIOCINQ: %v", err)
	}
	// Echoes reach the master through the tty's work queue.
	time.Sleep(settle)
	mfd := int(master.Fd())
	if err := unix.SetNonblock(mfd, true); err != nil {
		t.Fatal(err)
	}
	var echoed strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(mfd, buf)
		if n <= 0 || err != nil {
			break
		}
		echoed.Write(buf[:n])
	}
	return inq, echoed.String()
}

// ttyCommand runs argv with the pty slave as stdin and controlling
// terminal of a new session: the position of agentrun started from an
// interactive shell.
func ttyCommand(slave *os.File, argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + sandboxPath, "LANG=C", "TERM=xterm"}
	cmd.Dir = os.TempDir()
	cmd.Stdin = slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	return cmd
}

// TestTIOCSTI: the command cannot push keystrokes into the caller's
// terminal: not on fd 0, not via /dev/tty, not after taking the terminal
// as its controlling tty.
func TestTIOCSTI(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	inject := token("INJ") + "\n"

	// Control: the same attack outside any sandbox works here unless the
	// kernel forbids TIOCSTI altogether (dev.tty.legacy_tiocsti=0).
	t.Run("control: outside the sandbox", func(t *testing.T) {
		master, slave, _ := openPTY(t)
		cmd := ttyCommand(slave, attackerBin, "tiocsti", inject)
		out, _ := cmd.Output()
		inq, echoed := pending(t, master, slave, 200*time.Millisecond)
		t.Logf("host attacker: %s; input queue %d bytes; echoed %q", strings.TrimSpace(string(out)), inq, echoed)
		if !strings.HasPrefix(string(out), "ESCAPED") || inq == 0 {
			if v := sysctl("dev/tty/legacy_tiocsti"); v == "0" {
				t.Skipf("this kernel forbids TIOCSTI for everyone (dev.tty.legacy_tiocsti=0); the sandbox test below still runs but proves less")
			}
			t.Errorf("the harness cannot observe TIOCSTI injection even outside the sandbox: verdict %q, queue %d", out, inq)
		}
	})

	t.Run("sandbox", func(t *testing.T) {
		master, slave, n := openPTY(t)
		var stdout, stderr strings.Builder
		cmd := ttyCommand(slave, agentrunBin, "spawn", "--workspace", ws, "--", "/workspace/attacker", "tiocsti", inject)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		r := runOnTTY(t, cmd, &stdout, &stderr)
		mustBlock(t, r, "TIOCSTI into the caller's terminal")
		inq, echoed := pending(t, master, slave, 200*time.Millisecond)
		if inq != 0 || strings.Contains(echoed, strings.TrimSpace(inject)) {
			t.Errorf("SANDBOX ESCAPE: keystrokes reached the caller's terminal: %d bytes queued, master read %q\n%s", inq, echoed, r)
		}

		// The caller's terminal is not even reachable by path: devpts is
		// a fresh instance inside.
		mustBlock(t, attack(t, ws, nil, "open", fmt.Sprintf("/dev/pts/%d", n), "w"), fmt.Sprintf("open the caller's /dev/pts/%d", n))
	})

	t.Run("TIOCLINUX", func(t *testing.T) {
		master, slave, _ := openPTY(t)
		var stdout, stderr strings.Builder
		cmd := ttyCommand(slave, agentrunBin, "spawn", "--workspace", ws, "--", "/workspace/attacker", "tioclinux")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = 5 * time.Second
		_ = cmd.Run()
		r := runResult{args: cmd.Args[1:], code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
		mustBlock(t, r, "TIOCLINUX on the terminal and on console devices")
		if inq, echoed := pending(t, master, slave, 100*time.Millisecond); inq != 0 || echoed != "" {
			t.Errorf("SANDBOX ESCAPE: TIOCLINUX left input on the caller's terminal: %d bytes, %q", inq, echoed)
		}
	})
}

// runOnTTY runs an agentrun command on a terminal (ttyCommand) to its end,
// with a hang guard of 60 s, and returns what it wrote to stdout and
// stderr.
func runOnTTY(t *testing.T, cmd *exec.Cmd, stdout, stderr *strings.Builder) runResult {
	t.Helper()
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("hang guard: agentrun on a terminal did not finish in 60 s")
	}
	return runResult{args: cmd.Args[1:], code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}
