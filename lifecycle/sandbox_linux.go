//go:build linux

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/cgroups"
	"github.com/agentrun/agentrun/internal/procid"
	"github.com/agentrun/agentrun/internal/statedir"
	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Options are the inputs of Create besides the Spec.
type Options struct {
	// ID names the sandbox. With an ID it has a state record in StateDir
	// by which other processes find it; Create refuses an ID in use.
	// Without one the sandbox is anonymous: nothing is written for it.
	ID string
	// StateDir holds the records; "" is StateDir(euid), which Compile
	// keeps out of every sandbox's binds. Another directory must be the
	// caller's alone and out of reach of the sandboxes too: its records
	// steer which processes Sweep kills.
	StateDir string

	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Warn receives one-line warnings (clamped rlimits, say).
	Warn func(string)
	// UsernsBlocker explains why a user namespace could not be made.
	UsernsBlocker func(cloneErr error) string
	// OnViolation, when set, routes the filter's denials through a
	// listener in this process that answers EPERM and reports each
	// distinct call; nil leaves the denying to the filter alone.
	OnViolation func(seccomp.Event)
	// SeccompCache compiles the Spec's filter; nil is a cache on disk in
	// the caller's state directory.
	SeccompCache seccomp.Compiler
	// LimitsOnly: nothing will read the cgroup's usage figures, so on
	// cgroup v1 the sandbox joins only the hierarchies that enforce its
	// limits (cgroups.Options.LimitsOnly). Only with a PID namespace,
	// through which the kernel ends the sandbox.
	LimitsOnly bool
	// NoRootTemplate builds a tmpfs root on every Create instead of
	// binding a root template (mounts/template_linux.go).
	NoRootTemplate bool
	// Forwarder, when set, passes the signals it took over on to the
	// init once the command runs.
	Forwarder *nsinit.Forwarder
	// Prestart, when set, offers Create an init the program started
	// before its Go runtime (the agentrun CLI's fast path).
	Prestart Prestart
	// Serve makes a session (nsinit.Config.Serve): the sandbox runs no
	// command of its own; after Start it runs a process per Exec until it
	// is deleted. It needs a PID namespace. Stdin, Stdout, Stderr,
	// Forwarder and Prestart do not apply.
	Serve bool
	// Socket is the path of the socket by which the caller serves the
	// sandbox, kept in its record (below the state directory); Delete and
	// Sweep remove it.
	Socket string
	// Holder says the caller is a process that exists only to hold this
	// sandbox (a persistent session's holder), kept in its record: others
	// may kill it to end the sandbox (Record.KillOwner). A program's own
	// sandbox is never killed that way.
	Holder bool
}

// Prestart is nsinit.Prestart for the lifecycle: once an adopted init's
// command runs, Adopted also gets what the sandbox was built from.
type Prestart interface {
	Take() (nsinit.Prestarted, bool)
	Cache(image []byte)
	Forget()
	Adopted(release []byte, b Built)
}

// Built is what a sandbox was built from besides its plan.
type Built struct {
	Spec        *specs.Spec
	Cgroup      *cgroups.Cgroup
	Undelegated *cgroups.Undelegated // why there is no cgroup, when Cgroup is nil
	Warned      bool                 // a warning was given
	// TemplateDir is the root template's directory ("" without one);
	// TemplateSkipped says the sandbox went without one for a passing
	// reason, so its plan is not the one later spawns will have.
	TemplateDir     string
	TemplateSkipped bool
}

// prestart adapts a Prestart to nsinit's, adding what the sandbox was
// built from.
type prestart struct {
	Prestart
	built func() Built
}

func (p prestart) Adopted(release []byte) { p.Prestart.Adopted(release, p.built()) }

// StepError is a failure to build the sandbox, naming the step that
// failed ("cgroups", "mount /workspace", ...).
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// Sandbox is one sandbox. Its methods may be called from any goroutine.
type Sandbox struct {
	id      string
	spec    *specs.Spec
	serve   bool
	recPath string // "" for an anonymous sandbox
	rec     Record

	proc  *nsinit.Process
	cg    *cgroups.Cgroup
	tasks []*os.File
	tmpl  *mounts.Template

	mu    sync.Mutex
	state State
	// released is closed once Start is over, or the sandbox was killed
	// before it: only then may Wait read the init's reports, which Start
	// reads until the command runs.
	released    chan struct{}
	releaseOnce sync.Once
	waited      chan struct{} // closed once Wait has the exit
	exit        nsinit.Exit
	exitErr     error
	waitOnce    sync.Once
	deleteOnce  sync.Once
	deleteErr   error
	deleted     bool
}

// Create builds the sandbox of spec: its cgroup, root template, init and
// namespaces. It returns once the init has built the root and waits for
// Start; nothing of the command has run. On error nothing is left behind.
func Create(ctx context.Context, spec *specs.Spec, opts Options) (_ *Sandbox, err error) {
	s := &Sandbox{id: opts.ID, spec: spec, serve: opts.Serve, state: Creating, released: make(chan struct{}), waited: make(chan struct{})}
	if opts.ID != "" {
		if err := ValidID(opts.ID); err != nil {
			return nil, err
		}
		self, serr := procid.Self()
		if serr != nil {
			return nil, serr
		}
		dir := opts.StateDir
		if dir == "" {
			dir = StateDir(os.Geteuid())
		}
		s.rec = Record{Version: recordVersion, ID: opts.ID, State: Creating, Owner: self, Created: time.Now().UTC(), Serve: opts.Serve, Socket: opts.Socket, Holder: opts.Holder}
		path, cerr := createRecord(dir, &s.rec)
		if cerr != nil {
			return nil, cerr
		}
		s.recPath = path
		defer func() {
			if err != nil {
				_ = removeRecord(path)
			}
		}()
	}

	// The cgroup is made while nsinit prepares the mounts; the clone waits
	// for it (CgroupReady).
	type made struct {
		cg    *cgroups.Cgroup
		und   *cgroups.Undelegated
		place *nsinit.CgroupPlacement
		err   error
	}
	madeCh := make(chan made, 1)
	go func() {
		cg, und, err := sandboxCgroup(spec, opts.LimitsOnly && nsinit.HasNamespace(spec, specs.PIDNamespace))
		if err != nil || cg == nil {
			madeCh <- made{und: und, err: err}
			return
		}
		tasks, err := cg.OpenTasks()
		if err != nil {
			_ = cg.Delete()
			madeCh <- made{err: err}
			return
		}
		madeCh <- made{cg: cg, place: &nsinit.CgroupPlacement{FD: cg.FD(), Add: cg.Add, Tasks: tasks}}
	}()
	cgroup := sync.OnceValue(func() made { return <-madeCh })
	defer func() {
		if err == nil {
			return
		}
		m := cgroup()
		if m.place != nil {
			for _, f := range m.place.Tasks {
				f.Close()
			}
		}
		if m.cg != nil {
			_ = m.cg.Delete()
		}
		if s.tmpl != nil {
			s.tmpl.Close()
		}
	}()

	// A copy of spec: the cgroup's goroutine reads spec meanwhile.
	initSpec, tmpl, skipped := rootTemplate(spec, opts.NoRootTemplate)
	s.tmpl = tmpl
	cache := opts.SeccompCache
	if cache == nil {
		cache = &seccomp.DiskCache{Dir: filepath.Join(statedir.Root(os.Geteuid()), "seccomp")}
	}
	var warned atomic.Bool
	cfg := &nsinit.Config{
		Spec: initSpec, Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
		Warn: func(m string) {
			warned.Store(true)
			if opts.Warn != nil {
				opts.Warn(m)
			}
		},
		UsernsBlocker: opts.UsernsBlocker,
		SeccompCache:  cache, Forwarder: opts.Forwarder, OnViolation: opts.OnViolation,
		Serve: opts.Serve,
		CgroupReady: func() (*nsinit.CgroupPlacement, error) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			m := cgroup()
			if m.err != nil {
				return nil, m.err
			}
			return m.place, nil
		},
	}
	if opts.Serve {
		cfg.Stdin, cfg.Stdout, cfg.Stderr, cfg.Forwarder = nil, nil, nil, nil
	}
	if opts.Prestart != nil && !opts.Serve {
		cfg.Prestart = prestart{Prestart: opts.Prestart, built: func() Built {
			m := cgroup()
			b := Built{Spec: spec, Cgroup: m.cg, Undelegated: m.und, Warned: warned.Load(), TemplateSkipped: skipped}
			if tmpl != nil {
				b.TemplateDir = tmpl.Dir
			}
			return b
		}}
	}
	proc, err := nsinit.Create(cfg)
	if m := cgroup(); m.err != nil {
		if proc != nil {
			_ = proc.Kill()
			_, _ = proc.Wait()
		}
		return nil, &StepError{Step: "cgroups", Err: m.err}
	}
	if err != nil {
		var se *nsinit.StepError
		if errors.As(err, &se) {
			return nil, &StepError{Step: se.Step, Err: errors.New(se.Msg)}
		}
		if errors.Is(err, ctx.Err()) {
			return nil, err
		}
		return nil, &StepError{Step: "start", Err: err}
	}
	m := cgroup()
	s.proc, s.cg = proc, m.cg
	if m.place != nil {
		s.tasks = m.place.Tasks
	}
	s.state = Created
	if s.recPath != "" {
		s.rec.State = Created
		if id, err := procid.Of(proc.Pid()); err == nil {
			s.rec.Init = &id
		}
		if m.cg != nil {
			s.rec.Cgroup = m.cg.Paths()
		}
		if err := rewriteRecord(s.recPath, &s.rec); err != nil {
			_ = proc.Kill()
			s.release()
			s.reap()
			if s.cg != nil {
				_ = s.cg.Delete()
			}
			for _, f := range s.tasks {
				f.Close()
			}
			return nil, err
		}
	}
	return s, nil
}

// ID is the sandbox's name, "" for an anonymous one.
func (s *Sandbox) ID() string { return s.id }

// Spec is the Spec the sandbox was created from.
func (s *Sandbox) Spec() *specs.Spec { return s.spec }

// Pid is the host pid of the sandbox's init.
func (s *Sandbox) Pid() int { return s.proc.Pid() }

// State is where the sandbox is in its life.
func (s *Sandbox) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Prestart is what became of the CLI's prestart (nsinit.Process.Prestart).
func (s *Sandbox) Prestart() string { return s.proc.Prestart() }

// Start runs the sandbox's command. It returns once the command runs, or
// could not be started (not found, not executable: Wait then reports the
// shell-style status). A Start that fails leaves a stopped sandbox, which
// Delete removes.
func (s *Sandbox) Start() error {
	s.mu.Lock()
	if s.state != Created || s.deleted {
		st := s.state
		s.mu.Unlock()
		return fmt.Errorf("lifecycle: sandbox %q is %s, not %s", s.id, st, Created)
	}
	s.state = Running
	s.mu.Unlock()
	err := s.proc.Start()
	s.release()
	// The tasks files have done their work: the init joined its cgroup.
	s.closeTasks()
	if err != nil {
		s.setStopped()
		var se *nsinit.StepError
		if errors.As(err, &se) {
			return &StepError{Step: se.Step, Err: errors.New(se.Msg)}
		}
		return &StepError{Step: "start", Err: err}
	}
	s.updateRecord(Running)
	return nil
}

// release opens the way for Wait: Start is over, or will never come.
func (s *Sandbox) release() { s.releaseOnce.Do(func() { close(s.released) }) }

// closeTasks closes the v1 cgroup "tasks" files the init joined by.
func (s *Sandbox) closeTasks() {
	s.mu.Lock()
	tasks := s.tasks
	s.tasks = nil
	s.mu.Unlock()
	for _, f := range tasks {
		f.Close()
	}
}

// Signal sends sig to the init, which passes it on to the command; one
// sent before Start reaches the command as it starts. The init of a
// serving sandbox passes nothing on (only SIGKILL ends it): SignalAll
// signals its processes.
func (s *Sandbox) Signal(sig syscall.Signal) error { return s.proc.Signal(sig) }

// Exec starts a process in a serving sandbox (Options.Serve) that is
// running: see nsinit.Process.Exec.
func (s *Sandbox) Exec(x nsinit.ExecSpec) (*nsinit.Child, error) {
	if err := s.serving(); err != nil {
		return nil, err
	}
	return s.proc.Exec(x)
}

// SignalAll sends sig to every process of a running serving sandbox but
// its init.
func (s *Sandbox) SignalAll(sig syscall.Signal) error {
	if err := s.serving(); err != nil {
		return err
	}
	return s.proc.SignalAll(sig)
}

// serving says why Exec cannot be used now, if it cannot.
func (s *Sandbox) serving() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.serve:
		return fmt.Errorf("lifecycle: sandbox %q was not created to serve execs (Options.Serve)", s.id)
	case s.state != Running || s.deleted:
		return fmt.Errorf("lifecycle: sandbox %q is %s, not %s", s.id, s.state, Running)
	}
	return nil
}

// Kill ends the whole sandbox: the init dies, and the kernel kills every
// process left in its PID namespace. A sandbox killed before Start never
// runs its command.
func (s *Sandbox) Kill() error {
	err := s.proc.Kill()
	s.mu.Lock()
	if s.state == Created {
		// Start would find the init gone; Wait may read its end.
		s.state = Stopped
		s.mu.Unlock()
		s.release()
		return err
	}
	s.mu.Unlock()
	return err
}

// Wait blocks until the sandbox has ended and returns how its command
// ended (for a serving sandbox, how its init ended: it runs until it is
// killed or deleted); for a sandbox not started yet, it waits for Start,
// Kill or Delete first. Without a PID namespace the cgroup is killed too, so that
// nothing of the sandbox outlives it. Every call returns the same.
func (s *Sandbox) Wait() (nsinit.Exit, error) {
	<-s.released
	s.reap()
	return s.exit, s.exitErr
}

// reap waits for the init once, whatever calls first.
func (s *Sandbox) reap() {
	s.waitOnce.Do(func() {
		s.exit, s.exitErr = s.proc.Wait()
		if s.cg != nil && !nsinit.HasNamespace(s.spec, specs.PIDNamespace) {
			_ = s.cg.Kill()
		}
		s.setStopped()
		close(s.waited)
	})
}

// Done is closed once the sandbox has ended and Wait (or Delete) has
// reaped it.
func (s *Sandbox) Done() <-chan struct{} { return s.waited }

func (s *Sandbox) setStopped() {
	s.mu.Lock()
	s.state = Stopped
	s.mu.Unlock()
	s.updateRecord(Stopped)
}

// updateRecord writes st into the record, unless the sandbox moved on
// meanwhile (a Running that comes after a Stopped). A failed write leaves
// the record behind its sandbox, which readers correct from the
// processes (Record.observed); nothing else depends on it.
func (s *Sandbox) updateRecord(st State) {
	if s.recPath == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted || s.rec.State == Stopped || (st == Running && s.state != Running) {
		return
	}
	s.rec.State = st
	_ = rewriteRecord(s.recPath, &s.rec)
}

// Limits says what enforces the sandbox's resource limits: "cgroup-v2",
// "cgroup-v1", or "none".
func (s *Sandbox) Limits() string {
	switch {
	case s.cg == nil:
		return "none"
	case s.cg.V2():
		return "cgroup-v2"
	}
	return "cgroup-v1"
}

// Stats reads the sandbox's cgroup counters; ok is false without a cgroup
// or when they cannot be read. Read them after Wait and before Delete.
func (s *Sandbox) Stats() (st cgroups.Stats, ok bool) {
	if s.cg == nil {
		return st, false
	}
	st, err := s.cg.Stats()
	return st, err == nil
}

// Violations returns the denied calls the listener saw, once the sandbox
// has ended.
func (s *Sandbox) Violations() []seccomp.Event { return s.proc.Violations() }

// Delete ends the sandbox if it still runs, and removes what it held: its
// cgroup, its hold on the root template and its record. A sandbox that was
// created and never started is deleted the same way. It may be called
// more than once.
func (s *Sandbox) Delete() error {
	s.deleteOnce.Do(func() { s.deleteErr = s.delete() })
	return s.deleteErr
}

func (s *Sandbox) delete() error {
	s.mu.Lock()
	s.deleted = true
	s.mu.Unlock()
	select {
	case <-s.waited:
	default:
		_ = s.Kill()
	}
	// A Start running meanwhile returns once the init is gone.
	<-s.released
	s.reap()
	s.closeTasks()
	var err error
	if s.cg != nil {
		err = s.cg.Delete()
	}
	if s.tmpl != nil {
		s.tmpl.Close()
	}
	if s.recPath != "" {
		removeSocket(filepath.Dir(s.recPath), s.rec.Socket)
		err = errors.Join(err, removeRecord(s.recPath))
	}
	return err
}
