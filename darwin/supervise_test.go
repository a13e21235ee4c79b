package darwin

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sh(script string) *exec.Cmd {
	return exec.Command("/bin/sh", "-c", script)
}

// gone reports whether pid has exited (a zombie awaiting its reaper counts).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d outlived the run", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		b, err := os.ReadFile(file)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", file)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func supervise(t *testing.T, ctx context.Context, cmd *exec.Cmd, s Stdio, sv Supervision) (ProcExit, bool) {
	t.Helper()
	if sv.Drain == 0 {
		sv.Drain = 100 * time.Millisecond
	}
	exit, timedOut, err := Supervise(ctx, cmd, s, sv)
	if err != nil {
		t.Fatal(err)
	}
	return exit, timedOut
}

func TestSuperviseExitAndSignal(t *testing.T) {
	if exit, _ := supervise(t, context.Background(), sh("exit 3"), Stdio{}, Supervision{}); exit != (ProcExit{Code: 3}) {
		t.Errorf("exit = %+v, want code 3", exit)
	}
	if exit, _ := supervise(t, context.Background(), sh("kill -TERM $$"), Stdio{}, Supervision{}); exit != (ProcExit{Signal: 15}) {
		t.Errorf("exit = %+v, want signal 15", exit)
	}
}

func TestSuperviseStdioThroughPipes(t *testing.T) {
	var out, errb bytes.Buffer
	exit, _ := supervise(t, context.Background(), sh("cat; echo oops >&2"),
		Stdio{In: strings.NewReader("hello\n"), Out: &out, Err: &errb}, Supervision{})
	if exit.Code != 0 || out.String() != "hello\n" || errb.String() != "oops\n" {
		t.Errorf("exit %+v, stdout %q, stderr %q", exit, out.String(), errb.String())
	}
}

func TestSuperviseTimeoutKillsTheGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	exit, timedOut := supervise(t, context.Background(), sh("sleep 30 & echo $! > "+pidFile+"; wait"),
		Stdio{}, Supervision{Timeout: 300 * time.Millisecond})
	if !timedOut || exit.Signal != int(syscall.SIGKILL) {
		t.Errorf("exit %+v timedOut %v, want SIGKILL by the timeout", exit, timedOut)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("timeout did not end the run promptly")
	}
	waitGone(t, readPid(t, pidFile))
}

func TestSuperviseKillsBackgroundLeftovers(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	var out bytes.Buffer
	exit, timedOut := supervise(t, context.Background(), sh("sleep 30 & echo $! > "+pidFile),
		Stdio{Out: &out}, Supervision{})
	if exit.Code != 0 || timedOut {
		t.Errorf("exit %+v timedOut %v", exit, timedOut)
	}
	waitGone(t, readPid(t, pidFile))
}

func TestSuperviseEscapedDaemonCannotHangTheRun(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) not installed")
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	var out bytes.Buffer
	start := time.Now()
	supervise(t, context.Background(), sh("setsid sh -c 'echo $$ > "+pidFile+"; exec sleep 30' & while [ ! -s "+pidFile+" ]; do sleep 0.01; done"),
		Stdio{Out: &out}, Supervision{Drain: 100 * time.Millisecond})
	pid := readPid(t, pidFile)
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("run took %v with a daemon holding stdout", d)
	}
}

func TestSuperviseForwardsSignals(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	sigs := make(chan os.Signal, 1)
	go func() {
		readPid(t, ready)
		sigs <- syscall.SIGUSR1
	}()
	exit, _ := supervise(t, context.Background(),
		sh(`trap "exit 42" USR1; echo $$ > `+ready+`; while :; do sleep 0.05; done`),
		Stdio{}, Supervision{Signals: sigs, Timeout: 10 * time.Second})
	if exit.Code != 42 {
		t.Errorf("exit = %+v, want 42 from the USR1 trap", exit)
	}
}

func TestSuperviseContextCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	exit, timedOut := supervise(t, ctx, sh("sleep 30"), Stdio{}, Supervision{})
	if timedOut || exit.Signal != int(syscall.SIGKILL) {
		t.Errorf("exit %+v timedOut %v, want SIGKILL without the policy timeout", exit, timedOut)
	}
}

func TestSuperviseStartsANewSession(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	var out bytes.Buffer
	supervise(t, context.Background(), sh(`echo $$; cut -d' ' -f6 /proc/$$/stat`), Stdio{Out: &out}, Supervision{})
	f := strings.Fields(out.String())
	if len(f) != 2 || f[0] != f[1] {
		t.Errorf("pid and session id = %q, want equal (session leader)", f)
	}
}

func TestSuperviseStartFailure(t *testing.T) {
	cmd := exec.Command(filepath.Join(t.TempDir(), "missing"))
	if _, _, err := Supervise(context.Background(), cmd, Stdio{Out: &bytes.Buffer{}}, Supervision{}); err == nil {
		t.Error("a missing program must fail to start")
	}
}

func TestSuperviseNilFiles(t *testing.T) {
	var in *os.File
	var out *os.File
	exit, _ := supervise(t, context.Background(), sh("cat; echo x"), Stdio{In: in, Out: out, Err: out}, Supervision{})
	if exit.Code != 0 {
		t.Errorf("exit = %+v with nil *os.File streams", exit)
	}
}
