package darwin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Stdio is the caller's side of the command's standard streams. An
// *os.File is handed to the command as it is; any other reader or writer
// is connected through a pipe. nil means /dev/null.
type Stdio struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// Supervision controls a running command.
type Supervision struct {
	// Timeout kills the command's process group; zero means none.
	Timeout time.Duration
	// Signals are forwarded to the command's process group.
	Signals <-chan os.Signal
	// Drain bounds how long output still in flight is copied after the
	// process group is gone (a daemon that left the group may hold a pipe).
	// Zero means DefaultOutputDrain.
	Drain time.Duration
}

// Supervise runs cmd in a new session and waits for it. The session makes
// the command the leader of its own process group, which is what timeout,
// forwarded signals and the final cleanup address, and leaves it without a
// controlling terminal, so TIOCSTI cannot push keystrokes into the
// caller's terminal unless the caller is root. It reports the exit and
// whether the timeout fired.
func Supervise(ctx context.Context, cmd *exec.Cmd, streams Stdio, sv Supervision) (ProcExit, bool, error) {
	if sv.Drain <= 0 {
		sv.Drain = DefaultOutputDrain
	}
	p, err := attach(cmd, streams)
	if err != nil {
		return ProcExit{}, false, err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if err := cmd.Start(); err != nil {
		p.abort()
		return ProcExit{}, false, fmt.Errorf("darwin: start %s: %w", cmd.Path, err)
	}
	p.started()
	pid := cmd.Process.Pid
	done := make(chan struct{})
	timedOut := make(chan bool, 1)
	go watch(ctx, pid, sv, done, timedOut)
	werr := cmd.Wait()
	close(done)
	// Background processes the command left in its group go with it, as
	// they would with the Linux sandbox's PID namespace. The group id
	// cannot be reused while any member is alive.
	killGroup(pid, syscall.SIGKILL)
	p.finish(sv.Drain)
	exit, err := procExit(cmd.ProcessState, werr)
	return exit, <-timedOut, err
}

// watch enforces the timeout and context and forwards signals until done.
func watch(ctx context.Context, pid int, sv Supervision, done <-chan struct{}, timedOut chan<- bool) {
	fired := false
	defer func() { timedOut <- fired }()
	var timer <-chan time.Time
	if sv.Timeout > 0 {
		t := time.NewTimer(sv.Timeout)
		defer t.Stop()
		timer = t.C
	}
	sigs := sv.Signals
	for {
		select {
		case <-done:
			return
		case <-timer:
			fired = true
			killGroup(pid, syscall.SIGKILL)
		case <-ctx.Done():
			killGroup(pid, syscall.SIGKILL)
			ctx = context.Background()
		case s, ok := <-sigs:
			if !ok {
				sigs = nil
				continue
			}
			if sig, ok := s.(syscall.Signal); ok {
				killGroup(pid, sig)
			}
		}
	}
}

func killGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}

func procExit(st *os.ProcessState, werr error) (ProcExit, error) {
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return ProcExit{}, fmt.Errorf("darwin: wait: %w", werr)
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok {
		return ProcExit{Code: st.ExitCode()}, nil
	}
	if ws.Signaled() {
		return ProcExit{Signal: int(ws.Signal())}, nil
	}
	return ProcExit{Code: ws.ExitStatus()}, nil
}

// pump owns the pipes between the caller's streams and the command. The
// command only ever receives *os.File values, so exec.Cmd.Wait returns when
// the process exits rather than when every holder of a pipe is gone.
type pump struct {
	childEnds []*os.File
	outs      []*os.File
	stdinSrc  io.Reader
	stdinW    *os.File
	wg        sync.WaitGroup
}

func attach(cmd *exec.Cmd, s Stdio) (*pump, error) {
	p := &pump{}
	var err error
	if cmd.Stdin, err = p.input(s.In); err != nil {
		return nil, err
	}
	if cmd.Stdout, err = p.output(s.Out); err != nil {
		p.abort()
		return nil, err
	}
	if cmd.Stderr, err = p.output(s.Err); err != nil {
		p.abort()
		return nil, err
	}
	return p, nil
}

func (p *pump) input(r io.Reader) (io.Reader, error) {
	if r == nil {
		return nil, nil
	}
	if f, ok := r.(*os.File); ok {
		if f == nil {
			return nil, nil
		}
		return f, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("darwin: stdin pipe: %w", err)
	}
	p.childEnds = append(p.childEnds, pr)
	p.stdinSrc, p.stdinW = r, pw
	return pr, nil
}

func (p *pump) output(w io.Writer) (io.Writer, error) {
	if w == nil {
		return nil, nil
	}
	if f, ok := w.(*os.File); ok {
		if f == nil {
			return nil, nil
		}
		return f, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("darwin: output pipe: %w", err)
	}
	p.childEnds = append(p.childEnds, pw)
	p.outs = append(p.outs, pr)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(w, pr)
	}()
	return pw, nil
}

// started closes the parent's copies of the child's ends and begins
// feeding stdin. The feed starts only now because a Read on the caller's
// reader cannot be interrupted and must not begin for a command that never
// ran; after the run it may stay blocked until the reader returns.
func (p *pump) started() {
	p.closeChildEnds()
	if p.stdinW == nil {
		return
	}
	go func(r io.Reader, w *os.File) {
		_, _ = io.Copy(w, r)
		_ = w.Close()
	}(p.stdinSrc, p.stdinW)
}

func (p *pump) closeChildEnds() {
	for _, f := range p.childEnds {
		_ = f.Close()
	}
	p.childEnds = nil
}

// finish waits up to drain for the output copies, then closes the read
// ends so a pipe held open by an escaped daemon cannot hang the run.
func (p *pump) finish(drain time.Duration) {
	if p.stdinW != nil {
		_ = p.stdinW.Close()
	}
	copied := make(chan struct{})
	go func() { p.wg.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(drain):
		for _, f := range p.outs {
			_ = f.Close()
		}
		<-copied
	}
}

func (p *pump) abort() {
	p.closeChildEnds()
	for _, f := range p.outs {
		_ = f.Close()
	}
	if p.stdinW != nil {
		_ = p.stdinW.Close()
	}
	p.wg.Wait()
}

// MarkInheritedCloseOnExec sets close-on-exec on every descriptor above 2
// listed in fdDir (/dev/fd). Go opens its own files close-on-exec, but
// descriptors this process inherited from its parent are not, and exec
// would pass them on into the sandbox. It changes the whole process: a
// descriptor deliberately left inheritable for another child is no longer.
func MarkInheritedCloseOnExec(fdDir string) error {
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return fmt.Errorf("darwin: list open descriptors: %w", err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		syscall.CloseOnExec(fd)
	}
	return nil
}
