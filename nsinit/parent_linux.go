//go:build linux

package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Config is what Start needs besides the Spec.
type Config struct {
	Spec   *specs.Spec
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Warn receives one-line warnings (e.g. clamped rlimits).
	Warn func(string)
	// UsernsBlocker explains, given clone's error, why a user namespace
	// could not be created; the caller supplies it so this package stays
	// free of host probing.
	UsernsBlocker func(cloneErr error) string
	// Cgroup, when set, places the sandbox in its cgroup before any code of
	// the sandbox runs.
	Cgroup *CgroupPlacement
	// CgroupReady, when set instead of Cgroup, supplies the placement just
	// before the clone, so the caller can create the cgroup while Start
	// prepares the mounts. A nil placement means no cgroup; an error
	// aborts Start and is returned as it is.
	CgroupReady func() (*CgroupPlacement, error)
	// SeccompCache compiles Spec.Linux.Seccomp; reuse one across spawns so
	// the same profile is compiled once. Nil compiles every time.
	SeccompCache seccomp.Compiler
	// OnViolation, when set, turns the profile's denials into reports:
	// denied calls go to a user-notification listener in this process,
	// which answers EPERM and calls OnViolation once per distinct call.
	OnViolation func(seccomp.Event)
	// Forwarder, when set, sends the signals it hooked on to the init
	// once the command has started (those that came earlier are sent
	// then), until the init exits (later ones are swallowed until the
	// caller stops it). ForwardSignals makes one.
	Forwarder *Forwarder
	// Prestart, when set, offers Start an init the program started before
	// its Go runtime, and caches this spawn's plan for the next one.
	Prestart Prestart
	// Serve makes a session: the init runs no command of its own
	// (Spec.Process.Args is unused) and, once started, runs a process per
	// Process.Exec, each confined as the command would be, until the
	// sandbox is killed. It needs a PID namespace, and a filter that
	// allows what the init does to serve (refused at Create otherwise).
	// Stdin, Stdout, Stderr and Prestart do not apply.
	Serve bool

	// usernsHolder, when set, replaces the C init's idmap holder
	// (cinit.UsernsHolder), so that a test can watch every holder's
	// release.
	usernsHolder func(pipeRead int) (pid int, reaped func(), err error)
}

// placement is the cgroup placement, waiting for CgroupReady if set.
func (cfg *Config) placement() (*CgroupPlacement, error) {
	if cfg.CgroupReady != nil {
		return cfg.CgroupReady()
	}
	return cfg.Cgroup, nil
}

// CgroupPlacement says how to put the init into its cgroup.
type CgroupPlacement struct {
	// FD is a cgroup v2 directory for clone3(CLONE_INTO_CGROUP), which
	// places the child atomically; -1 when there is none (v1).
	FD int
	// Add places a running pid; used on v1 and when clone3 is refused,
	// while the child is still blocked waiting for its config.
	Add func(pid int) error
	// Tasks, when set, are the v1 "tasks" files (cgroups.Cgroup.OpenTasks)
	// the C init writes "0" to as its first act, while it is still a
	// single thread: far cheaper than Add, which migrates a whole thread
	// group. Unused on v2.
	Tasks []*os.File
}

// postCloneError is a failure of the release step that runs right after
// the clone; Start kills the child and reports it under step.
type postCloneError struct {
	step string
	err  error
}

func (e *postCloneError) Error() string { return e.step + ": " + e.err.Error() }

// Exit is how the sandboxed command ended.
type Exit struct {
	Code   int // exit status, or 128+Signal
	Signal int // signal that killed the command (or init), 0 if none
}

// Process is a running sandbox.
type Process struct {
	pid    int
	sock   *os.File
	waited chan struct{}
	status *syscall.WaitStatus // how init ended, once reaped
	err    error
	// pending holds an exit report that arrived during Start.
	pending *report
	// inCgroup says clone3 placed the init in its cgroup.
	inCgroup bool
	// postClone is set when the C init's release step (id maps, the sync
	// byte) failed; set before Start learns of the child.
	postClone *postCloneError
	// prog is the loaded filter; notifier answers its user notifications.
	prog        *seccomp.Program
	onViolation func(seccomp.Event)
	notifier    *seccomp.Notifier
	// prestart is what became of the CLI's prestart (PrestartHit...), or
	// "" when there was none.
	prestart string
	// holders counts the idmap holders still being reaped (nil: none);
	// Wait waits for them, so that none outlives the spawn unreaped.
	holders *sync.WaitGroup
	// release sends the init its release and waits until the command
	// runs; set by Create, taken by Start.
	release func() error

	// fwdMu orders signals and the forwarder's attach and detach against
	// the reaping: nothing is sent to the pid, or through the pidfd, once
	// the init is marked reaped.
	fwdMu    sync.Mutex
	pidfd    int  // a pidfd of the init, when hasPidfd
	hasPidfd bool // opened before anything could reap the init
	reaped   bool
	fw       *Forwarder // Config.Forwarder, attached once the command runs

	// serve is the exec server of a Config.Serve sandbox; serving is set
	// once its demux reads the socket.
	serve   *server
	serving atomic.Bool
	// ttyDenied names a call of an exec on a terminal that the filter
	// denies ("" when it allows them all): such execs are refused.
	ttyDenied string
}

// openPidfd opens a pidfd for the init, which must not be reaped yet. A
// kernel without pidfds (before 5.3) leaves signals going to the pid.
func (p *Process) openPidfd() {
	if fd, err := unix.PidfdOpen(p.pid, 0); err == nil {
		p.pidfd, p.hasPidfd = fd, true
	}
}

// attachForwarder points the Forwarder at the init once the command has
// started: the init dies of a signal that arrives before it has set up its
// own forwarding to the command.
func (p *Process) attachForwarder() {
	p.fwdMu.Lock()
	defer p.fwdMu.Unlock()
	if p.fw == nil || p.reaped {
		return
	}
	fd := -1
	if p.hasPidfd {
		fd = p.pidfd
	}
	p.fw.attach(fd, p.pid, p.Signal)
}

// awaitExitNoReap waits for the init to exit without reaping it, so its
// pid stays its own, and then marks it reaped: nothing signals it after.
func (p *Process) awaitExitNoReap() {
	for {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != unix.EINTR {
			break
		}
	}
	p.markReaped()
}

// setForwarder hands the Process its Forwarder; under fwdMu, because its
// reaper may already run.
func (p *Process) setForwarder(f *Forwarder) {
	p.fwdMu.Lock()
	p.fw = f
	p.fwdMu.Unlock()
}

// markReaped ends the forwarding to the init and closes its pidfd: the
// init has exited, and is reaped or about to be.
func (p *Process) markReaped() {
	p.fwdMu.Lock()
	defer p.fwdMu.Unlock()
	if p.fw != nil {
		p.fw.detach()
	}
	if p.hasPidfd {
		unix.Close(p.pidfd)
		p.hasPidfd = false
	}
	p.reaped = true
}

// Prestart reports whether this sandbox's init was started before the Go
// runtime (PrestartHit), why not (PrestartMiss, PrestartMismatch), or ""
// when the program does not prestart.
func (p *Process) Prestart() string { return p.prestart }

// Start clones the C init into the Spec's namespaces and returns once the
// command is running, or with a *StepError naming what failed: Create and
// Process.Start in one.
func Start(cfg *Config) (*Process, error) {
	p, err := Create(cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// Create clones the C init into the Spec's namespaces, places it in its
// cgroup and returns once the init has built the root and waits for its
// release, or with a *StepError naming what failed. Nothing of the
// command runs until Process.Start; Kill and Wait end a sandbox that never
// starts.
func Create(cfg *Config) (*Process, error) {
	if err := checkNamespaces(cfg.Spec); err != nil {
		return nil, err
	}
	if cfg.Serve && !HasNamespace(cfg.Spec, specs.PIDNamespace) {
		// Its init's end must take every process it started along.
		return nil, &StepError{Step: "serve", Msg: "a serving sandbox needs a PID namespace"}
	}
	return startC(cfg) // cstart_linux.go
}

// Start releases an init that Create left waiting: it loads the filter
// and starts the command. It returns once the command runs (or could not
// be started: Wait then reports the shell-style status), or with the
// error that ended the sandbox, which is then gone.
func (p *Process) Start() error {
	if p.release == nil {
		return errors.New("nsinit: the sandbox was started already")
	}
	release := p.release
	p.release = nil
	return release()
}

// awaitStarted reads the child's setup reports until the command runs.
// writeErr is the error of the parent's last message to the child, if any:
// when the child is gone, its report (if it sent one) says why.
func (p *Process) awaitStarted(writeErr error) (*Process, error) {
	r, err := p.readSetup()
	switch {
	case err != nil && writeErr != nil:
		p.Kill()
		return nil, p.failed("sync", writeErr)
	case err != nil:
		p.Kill()
		return nil, p.failed("init", err)
	case r.Type == repError:
		p.wait()
		return nil, &StepError{Step: r.Step, Msg: r.Error}
	case r.Type == repExit:
		// The command could not even be started (not found, not
		// executable): a normal exit with a shell-style status.
		p.pending = &r
		return p, nil
	case r.Type != repStarted:
		p.Kill()
		return nil, p.failed("sync", fmt.Errorf("unexpected report %q", r.Type))
	}
	if p.serve != nil {
		// From here on the demux alone reads the socket.
		p.serving.Store(true)
		go p.serve.demux()
		return p, nil
	}
	p.attachForwarder()
	return p, nil
}

// withCloneFallback starts the init through start, inside its v2 cgroup
// (clone3 CLONE_INTO_CGROUP) when cg has one, and once more without it
// when clone3 itself was refused: placement then moves the pid while the
// child waits.
func withCloneFallback(cg *CgroupPlacement, start func(intoCgroup bool) (*Process, error)) (*Process, error) {
	into := cg != nil && cg.FD >= 0
	p, err := start(into)
	if err != nil && into && clone3Refused(err) {
		p, err = start(false)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// clone3Refused reports whether clone3 itself was refused (an old kernel,
// or a seccomp filter around this process), so placement must fall back
// to moving the pid while the child waits.
func clone3Refused(err error) bool {
	return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.E2BIG)
}

// placeCgroup moves the init into its cgroup unless clone3 already did.
// The init blocks on the config message, so nothing of it has run yet.
func (p *Process) placeCgroup(cg *CgroupPlacement) error {
	if cg == nil || p.inCgroup {
		return nil
	}
	if cg.Add == nil {
		// A cgroup was asked for (a v2 fd that clone3 could not use), and
		// running the sandbox outside it would be weaker than requested.
		if cg.FD >= 0 || len(cg.Tasks) > 0 {
			return &StepError{Step: "cgroup placement", Msg: "the init could not be placed at clone time and the placement has no Add"}
		}
		return nil
	}
	if err := cg.Add(p.pid); err != nil {
		return &StepError{Step: "cgroup placement", Msg: err.Error()}
	}
	return nil
}

// checkNamespaces refuses what the init does not implement: joining an
// existing namespace. Creating a fresh one instead would silently ignore
// what the Spec asked for.
func checkNamespaces(spec *specs.Spec) error {
	if spec == nil || spec.Linux == nil {
		return nil
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Path != "" {
			return &StepError{Step: "namespaces", Msg: fmt.Sprintf("joining the %s namespace at %s is not supported", ns.Type, ns.Path)}
		}
	}
	return nil
}

func nsFlag(t specs.LinuxNamespaceType) uintptr {
	switch t {
	case specs.UserNamespace:
		return unix.CLONE_NEWUSER
	case specs.MountNamespace:
		return unix.CLONE_NEWNS
	case specs.PIDNamespace:
		return unix.CLONE_NEWPID
	case specs.NetworkNamespace:
		return unix.CLONE_NEWNET
	case specs.UTSNamespace:
		return unix.CLONE_NEWUTS
	case specs.IPCNamespace:
		return unix.CLONE_NEWIPC
	case specs.CgroupNamespace:
		// Unshared by the child once it sits in its own cgroup, so the
		// namespace is rooted there rather than at the caller's cgroup.
		return 0
	}
	return 0
}

// startError names the missing kernel feature when clone fails.
func startError(err error, blocker func(error) string) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EUSERS) {
		msg := "cannot create user namespace: " + err.Error()
		if blocker != nil {
			if b := blocker(err); b != "" {
				msg = b
			}
		}
		return &StepError{Step: "user namespace", Msg: msg}
	}
	return &StepError{Step: "clone", Msg: err.Error()}
}

// read returns the next report from the child, with the descriptor that
// came with it (or -1).
func (p *Process) read() (report, error) {
	oob := make([]byte, unix.CmsgSpace(2*4))
	var n, oobn int
	var err error
	raw, err := p.sock.SyscallConn()
	if err != nil {
		return report{}, err
	}
	// Peek at the length first (MSG_TRUNC gives a packet's full size) and
	// read into a buffer of that size: reports are mostly tens of bytes,
	// and a large buffer per report is memory a short-lived parent has to
	// fault in.
	var peek [1]byte
	var buf []byte
	rerr := raw.Read(func(fd uintptr) bool {
		if buf == nil {
			n, _, _, _, err = unix.Recvmsg(int(fd), peek[:], nil, unix.MSG_PEEK|unix.MSG_TRUNC)
			if errors.Is(err, unix.ECONNRESET) {
				// The child is gone with a message of ours unread (it died
				// before reading the release byte): the kernel reports that
				// once, ahead of what the child sent, and that says why.
				n, _, _, _, err = unix.Recvmsg(int(fd), peek[:], nil, unix.MSG_PEEK|unix.MSG_TRUNC)
			}
			if err != nil || n == 0 {
				return !errors.Is(err, unix.EAGAIN)
			}
			buf = make([]byte, n)
		}
		n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.ECONNRESET) {
			// The same, when the child went away between the peek and
			// this read (seen in CI): the report is still queued.
			n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		}
		return !errors.Is(err, unix.EAGAIN)
	})
	if rerr != nil {
		return report{}, rerr
	}
	if err != nil {
		return report{}, err
	}
	if n == 0 {
		return report{}, io.EOF
	}
	r := report{fd: -1, fd2: -1}
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil && len(msgs) == 1 {
			if fds, ferr := unix.ParseUnixRights(&msgs[0]); ferr == nil && len(fds) >= 1 && len(fds) <= 2 {
				r.fd = fds[0]
				if len(fds) == 2 {
					r.fd2 = fds[1]
				}
			}
		}
	}
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		r.closeFDs()
		return report{}, fmt.Errorf("%w: %w", errBadReport, err)
	}
	return r, nil
}

// errBadReport is read's error for a message that is not a report.
var errBadReport = errors.New("bad report")

// readSetup returns the first report that ends the setup phase, taking
// the seccomp listener on the way.
func (p *Process) readSetup() (report, error) {
	for {
		r, err := p.read()
		if err != nil || r.Type != repListener {
			return r, err
		}
		if r.fd < 0 {
			return r, errors.New("listener report without a descriptor")
		}
		n, err := seccomp.NewNotifier(r.fd, p.prog, p.onViolation)
		if err != nil {
			unix.Close(r.fd)
			return r, fmt.Errorf("seccomp notifier: %w", err)
		}
		p.notifier = n
	}
}

// compileSeccomp compiles the Spec's filter, with denials routed to a
// listener when the caller wants reports.
func compileSeccomp(spec *specs.Spec, cfg *Config) (*seccomp.Program, error) {
	prof := spec.Linux.Seccomp
	if prof == nil {
		return nil, nil
	}
	if cfg.OnViolation != nil {
		var err error
		if prof, err = seccomp.NotifyOnDeny(prof); err != nil {
			return nil, &StepError{Step: "seccomp", Msg: err.Error()}
		}
	}
	compile := seccomp.Compile
	if cfg.SeccompCache != nil {
		compile = cfg.SeccompCache.Compile
	}
	prog, err := compile(prof)
	if err != nil {
		return nil, &StepError{Step: "seccomp", Msg: err.Error()}
	}
	return prog, nil
}

// Violations returns the denied calls the listener saw, once the sandbox
// has ended.
func (p *Process) Violations() []seccomp.Event {
	if p.notifier == nil {
		return nil
	}
	return p.notifier.Events()
}

// failed waits for a child that died during setup and describes it.
func (p *Process) failed(stepName string, cause error) error {
	p.wait()
	msg := cause.Error()
	if errors.Is(cause, io.EOF) {
		msg = "init exited without a report"
	}
	if p.status != nil {
		msg += " (" + describeStatus(*p.status) + ")"
	}
	return &StepError{Step: stepName, Msg: msg}
}

func (p *Process) wait() { <-p.waited }

// Pid is the host pid of the sandbox's init.
func (p *Process) Pid() int { return p.pid }

// Signal forwards sig to the command through init. A serving init
// passes nothing on: only SIGKILL has an effect (it ends the sandbox);
// SignalAll signals its processes.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.waited:
		return os.ErrProcessDone
	default:
	}
	p.fwdMu.Lock()
	defer p.fwdMu.Unlock()
	switch {
	case p.reaped || p.pid <= 0:
		return os.ErrProcessDone
	case p.hasPidfd:
		err := unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
		if err != unix.ENOSYS && err != unix.EPERM {
			return err
		}
		// Refused by the kernel or an outer filter: the pid is still
		// the init's (it is reaped only after markReaped).
	}
	return unix.Kill(p.pid, sig)
}

// Kill ends the whole sandbox: init dies and the kernel kills every
// process left in its PID namespace.
func (p *Process) Kill() error { return p.Signal(unix.SIGKILL) }

// Wait blocks until the sandbox has ended and returns how the command ended.
//
// For a serving sandbox it reports how the init ended: killed (137), or 0
// when it saw this process's end of the socket close.
func (p *Process) Wait() (Exit, error) {
	if p.serving.Load() {
		return p.waitServe()
	}
	r, rerr := report{}, error(nil)
	if p.pending != nil {
		r = *p.pending
	} else {
		r, rerr = p.read()
	}
	p.wait()
	if p.holders != nil {
		p.holders.Wait()
	}
	p.sock.Close()
	if p.notifier != nil {
		// Notifications of processes that died with init may still be in
		// flight; give the listener a moment to drain, then stop it.
		select {
		case <-p.notifier.Done():
		case <-time.After(100 * time.Millisecond):
		}
		p.notifier.Close()
	}
	if rerr == nil && r.Type == repExit {
		if r.Signal != 0 {
			return Exit{Code: 128 + r.Signal, Signal: r.Signal}, nil
		}
		return Exit{Code: r.Code}, nil
	}
	// No report: init itself was killed (timeout, SIGKILL from outside).
	if p.status == nil {
		return Exit{}, fmt.Errorf("nsinit: wait: %v", p.err)
	}
	ws := *p.status
	if ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}, nil
	}
	return Exit{Code: ws.ExitStatus()}, nil
}

// describeStatus says how a process ended, as os.ProcessState would.
func describeStatus(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		s := "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}

// clampRlimits lowers requests above the hard limit this process holds:
// raising a hard limit needs CAP_SYS_RESOURCE in the initial namespace,
// which a sandbox launcher should not need (and these hosts do not have).
func clampRlimits(proc *specs.Process, warn func(string)) {
	for i := range proc.Rlimits {
		r := &proc.Rlimits[i]
		res, ok := rlimitResource(r.Type)
		if !ok {
			continue
		}
		var cur unix.Rlimit
		if unix.Getrlimit(res, &cur) != nil {
			continue
		}
		if r.Hard > cur.Max {
			if warn != nil {
				warn(fmt.Sprintf("%s %d is above the hard limit %d this process holds; using %d", r.Type, r.Hard, cur.Max, cur.Max))
			}
			r.Hard = cur.Max
		}
		if r.Soft > r.Hard {
			r.Soft = r.Hard
		}
	}
}
