//go:build linux && cgo

package nsinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/nsinit/internal/cinit"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// startC starts the Spec's sandbox with the C init, cloned from this
// process: no re-exec of the binary and no second Go runtime.
//
// The work is pipelined: the filter compiles on another goroutine from the
// start, and the child builds its root while the parent places it in its
// cgroup (a migration on cgroup v1 waits for an RCU grace period) and waits
// for the filter. The release message then carries the filter; nothing of
// the command runs before it.
func startC(cfg *Config) (_ *Process, err error) {
	spec := cfg.Spec
	if spec.Process == nil || (len(spec.Process.Args) == 0 && !cfg.Serve) || spec.Linux == nil {
		return nil, &StepError{Step: "spec", Msg: "no process, args or linux section"}
	}
	clampRlimits(spec.Process, cfg.Warn)
	if spec.Process.User.UID == 0 {
		// Root in the namespace would keep its capabilities over execve.
		return nil, &StepError{Step: "drop privileges", Msg: "refusing to run the command as uid 0 of the sandbox"}
	}
	type compiled struct {
		prog *seccomp.Program
		err  error
	}
	progCh := make(chan compiled, 1)
	go func() {
		prog, err := compileSeccomp(spec, cfg)
		progCh <- compiled{prog, err}
	}()
	// awaitProg is the compiled filter; called exactly once, on every path.
	awaitProg := func() (*seccomp.Program, error) {
		c := <-progCh
		return c.prog, c.err
	}

	var pre prestarted
	if !cfg.Serve {
		pre = takePrestart(cfg, spec, awaitProg)
	}
	if pre.done {
		return pre.p, pre.err
	}

	// The idmap holders are killed once their user namespaces are open
	// and reaped off the spawn's path; a Start that fails waits for them,
	// since its caller may exit at once and leave them to a reaper that
	// never reaps (an agent runner that is a container's PID 1). A
	// started Process waits for them in Wait.
	holders := &sync.WaitGroup{}
	holder := cinit.UsernsHolder
	if cfg.usernsHolder != nil {
		holder = cfg.usernsHolder
	}
	defer func() {
		if err != nil {
			holders.Wait()
		}
	}()
	prep, err := prepareMounts(spec, func(uids, gids []specs.LinuxIDMapping) (int, error) {
		return usernsVia(holder, uids, gids, holders)
	})
	if err != nil {
		_, _ = awaitProg()
		return nil, err
	}
	defer prep.close()

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		_, _ = awaitProg()
		return nil, &StepError{Step: "sync socket", Msg: err.Error()}
	}
	parentSock := os.NewFile(uintptr(fds[0]), "sync-parent")
	childSock := os.NewFile(uintptr(fds[1]), "sync-child")
	defer childSock.Close()

	stdCfg := cfg
	if cfg.Serve {
		// The init's own stdio is /dev/null; each exec brings its own.
		stdCfg = &Config{}
	}
	std, err := newStdio(stdCfg)
	if err != nil {
		parentSock.Close()
		_, _ = awaitProg()
		return nil, &StepError{Step: "stdio", Msg: err.Error()}
	}
	plan, err := buildPlan(spec, prep, std.fds, int(childSock.Fd()))
	if err == nil && cfg.Serve {
		plan.Serve, plan.Argv = true, nil
	}
	if err != nil {
		parentSock.Close()
		std.closeAll()
		_, _ = awaitProg()
		return nil, err
	}

	cg, err := cfg.placement()
	if err != nil {
		parentSock.Close()
		std.closeAll()
		_, _ = awaitProg()
		return nil, err
	}
	if pre.image != nil && (cg == nil || len(cg.Tasks) > 0) {
		cfg.Prestart.Cache(pre.image)
	}
	// The id maps and the byte that releases the child into its setup are
	// written on the thread that cloned it, straight after the clone: a
	// hand-off to this goroutine first would hold the child back for a
	// scheduler wake-up.
	releaseChild := func(pid int) error {
		if plan.CloneFlags&unix.CLONE_NEWUSER != 0 {
			if err := writeIDMaps(pid, spec.Linux, os.Geteuid() != 0); err != nil {
				return &postCloneError{step: "id maps", err: err}
			}
		}
		// One byte: the maps are written; the child builds the root meanwhile.
		if _, err := parentSock.Write([]byte{'g'}); err != nil {
			return &postCloneError{step: "sync", err: err}
		}
		return nil
	}
	p, err := startCInit(plan, parentSock, std, cg, releaseChild)
	if err == nil && cfg.Serve {
		p.serve = newServer(p)
	}
	// The child holds its own copies now. The sync socket's child end in
	// particular must go at once: while this process holds it, a child
	// that dies without a report never shows up as EOF and Start hangs.
	childSock.Close()
	std.closeChildEnds()
	if err != nil {
		parentSock.Close()
		std.closeAll()
		_, _ = awaitProg()
		return nil, startError(err, cfg.UsernsBlocker)
	}
	// abort ends a child that was started but must not go on.
	abort := func(e error) (*Process, error) {
		p.Kill()
		p.wait()
		return nil, e
	}
	if pe := p.postClone; pe != nil {
		_, _ = awaitProg()
		p.Kill()
		// An init that failed before its go reported why; that the go
		// could not be sent only says that it is gone.
		return nil, p.childError(p.failed(pe.step, pe.err))
	}
	p.prestart = pre.outcome
	cgErr := p.placeCgroup(cg)
	prog, err := awaitProg()
	switch {
	case cgErr != nil:
		// The child may have failed first (and so left no pid to place):
		// its report names the cause.
		p.Kill()
		p.wait()
		return nil, p.childError(cgErr)
	case err != nil:
		return abort(err)
	}
	if cfg.Serve && prog != nil {
		// Fail closed: an init whose filter denies a call of its serving
		// would fail every exec, or be killed by the filter.
		if denied, pidfd := cinit.ServeCheck(prog.Filter); denied != "" || !pidfd {
			if denied == "" {
				denied = "clone with CLONE_PIDFD"
			}
			return abort(&StepError{Step: "seccomp", Msg: "the profile denies " + denied + ", which a serving sandbox's init needs"})
		}
		p.ttyDenied = cinit.ServeTTYCheck(prog.Filter)
	}
	release, err := releaseMsg(prog)
	if err != nil {
		return abort(err)
	}
	p.setForwarder(cfg.Forwarder)
	p.prog, p.onViolation = prog, cfg.OnViolation
	p.holders = holders
	p.release = func() error {
		// A write error means the child is gone; its report says why.
		_, werr := parentSock.Write(release)
		if _, err := p.awaitStarted(werr); err != nil {
			holders.Wait()
			return err
		}
		return nil
	}
	return p, nil
}

// releaseMsg is the release message for the compiled filter (nil: none).
func releaseMsg(prog *seccomp.Program) ([]byte, error) {
	var msg []byte
	var err error
	if prog != nil {
		msg, err = cinit.Release(prog.Filter, uint32(prog.Flags))
	} else {
		msg, err = cinit.Release(nil, 0)
	}
	if err != nil {
		return nil, &StepError{Step: "seccomp", Msg: err.Error()}
	}
	return msg, nil
}

// childError returns the error the dead child reported, or fallback when
// it reported none.
func (p *Process) childError(fallback error) error {
	if r, err := p.read(); err == nil && r.Type == repError {
		return &StepError{Step: r.Step, Msg: r.Error}
	}
	return fallback
}

// startCInit clones the init, into its cgroup when clone3 can place it
// there, otherwise plainly (placeCgroup then moves it before the child is
// released).
func startCInit(plan *cinit.Plan, sock *os.File, std *stdio, cg *CgroupPlacement, release func(pid int) error) (*Process, error) {
	return withCloneFallback(cg, func(intoCgroup bool) (*Process, error) {
		plan.CgroupFD, plan.TaskFDs = -1, nil
		selfPlaced := false
		switch {
		case intoCgroup:
			plan.CgroupFD = cg.FD
		case cg != nil && len(cg.Tasks) > 0:
			for _, f := range cg.Tasks {
				plan.TaskFDs = append(plan.TaskFDs, int(f.Fd()))
			}
			selfPlaced = true
		}
		p := &Process{sock: sock, waited: make(chan struct{}), inCgroup: intoCgroup || selfPlaced}
		started := make(chan error, 1)
		go p.runC(plan, std, release, started)
		return p, <-started
	})
}

// runC clones the init and waits for it on one locked OS thread: the
// parent death signal fires when the thread that cloned the child exits,
// so the thread must outlive the child.
func (p *Process) runC(plan *cinit.Plan, std *stdio, release func(pid int) error, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := cinit.Start(plan)
	if err != nil {
		started <- err
		close(p.waited)
		return
	}
	p.pid = pid
	p.openPidfd()
	if release != nil {
		if err := release(pid); err != nil {
			var pe *postCloneError
			if !errors.As(err, &pe) {
				pe = &postCloneError{step: "sync", err: err}
			}
			p.postClone = pe
		}
	}
	started <- nil
	p.awaitExit(std)
}

// awaitExit reaps the init and waits for its stdio copies (std, when any),
// then marks the Process waited. The init is this process's child and
// nothing else here reaps it, so its pid cannot be reused before this
// wait. (os.FindProcess would do the same through a pidfd, but its first
// use forks a process to probe for pidfd support.)
func (p *Process) awaitExit(std *stdio) {
	p.awaitExitNoReap()
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(p.pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			p.err = fmt.Errorf("wait4 %d: %w", p.pid, err)
		} else {
			p.status = &ws
		}
		break
	}
	if std != nil {
		if err := std.wait(); p.err == nil {
			p.err = err
		}
	}
	close(p.waited)
}

// buildPlan flattens the Spec into the C init's plan. Everything the child
// would have to parse or decide is done here, in the parent.
func buildPlan(spec *specs.Spec, prep *preparedMounts, stdio [3]int, sock int) (*cinit.Plan, error) {
	proc := spec.Process
	pl := &cinit.Plan{
		CgroupFD:     -1,
		FDs:          []int{stdio[0], stdio[1], stdio[2], sock},
		SyncFD:       syncFD,
		UID:          proc.User.UID,
		GID:          proc.User.GID,
		DropGroups:   os.Geteuid() == 0,
		Hostname:     spec.Hostname,
		Masked:       spec.Linux.MaskedPaths,
		Readonly:     spec.Linux.ReadonlyPaths,
		RootReadonly: spec.Root == nil || spec.Root.Readonly,
		Loopback:     HasNamespace(spec, specs.NetworkNamespace),
		Cwd:          proc.Cwd,
		Argv:         proc.Args,
		Env:          proc.Env,
		NoNewPrivs:   proc.NoNewPrivileges,
		// Unshared by the child once it sits in its cgroup (nsFlag leaves
		// it out of the clone flags), so the namespace is rooted there.
		UnshareCgroupNS: HasNamespace(spec, specs.CgroupNamespace),
	}
	for _, f := range prep.files {
		pl.FDs = append(pl.FDs, int(f.Fd()))
	}
	for _, ns := range spec.Linux.Namespaces {
		// Start refused namespace paths already (checkNamespaces).
		pl.CloneFlags |= uint64(nsFlag(ns.Type))
	}
	for c := range keptCaps(proc) {
		if c >= 64 {
			return nil, &StepError{Step: "capabilities", Msg: fmt.Sprintf("capability %d is beyond what the C init can grant", c)}
		}
		pl.KeepCaps |= 1 << c
	}
	pl.ExpectPPID = os.Getpid()
	if pl.CloneFlags&unix.CLONE_NEWPID != 0 {
		pl.ExpectPPID = -1
	}
	for _, kv := range proc.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pl.Path = v
		}
	}
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		cm := cinit.Mount{Type: m.Type, Dest: path.Clean("/" + m.Destination), Source: m.Source, FD: -1}
		switch {
		case m.Type == "bind" || m.Type == mounts.TypeRootTemplate:
			cm.Kind = cinit.Bind
			cm.Recursive = mounts.Recursive(m.Options)
			cm.Attr = mounts.Attrs(m.Options)
			if fd, ok := prep.childFDs[i]; ok {
				cm.FD = fd
			}
		case m.Type == mounts.TypeSymlink:
			cm.Kind = cinit.Symlink
		case m.Type == mounts.TypeCopy:
			cm.Kind = cinit.Copy
		case mounts.IsFilesystem(m.Type):
			cm.Kind = cinit.FS
			cm.Source = m.Type
			cm.Attr = mounts.Attrs(m.Options)
			for _, fp := range mounts.FSParams(m.Options) {
				cm.Params = append(cm.Params, cinit.FSParam{Key: fp.Key, Value: fp.Value, Flag: fp.Flag})
			}
		default:
			return nil, &StepError{Step: "mount " + m.Destination, Msg: fmt.Sprintf("mounts: %s %s: unsupported mount type %q", m.Type, m.Destination, m.Type)}
		}
		pl.Mounts = append(pl.Mounts, cm)
	}
	for _, d := range spec.Linux.Devices {
		pl.Devices = append(pl.Devices, cinit.Device{Path: d.Path, Dest: path.Clean("/" + d.Path)})
	}
	for _, r := range proc.Rlimits {
		res, ok := rlimitResource(r.Type)
		if !ok {
			return nil, &StepError{Step: "rlimits", Msg: "unknown rlimit " + r.Type}
		}
		pl.Rlimits = append(pl.Rlimits, cinit.Rlimit{Name: r.Type, Resource: res, Soft: r.Soft, Hard: r.Hard})
	}
	return pl, nil
}

// writeIDMaps writes the child's setgroups, uid_map and gid_map. Rootless,
// setgroups must be denied before an unprivileged gid_map is accepted; as
// root it stays allowed so that the init can drop the host's groups.
func writeIDMaps(pid int, lx *specs.Linux, rootless bool) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	setgroups := "allow"
	if rootless {
		setgroups = "deny"
	}
	if err := writeProc(dir+"setgroups", setgroups); err != nil {
		return err
	}
	if len(lx.UIDMappings) > 0 {
		if err := writeProc(dir+"uid_map", formatIDMap(lx.UIDMappings)); err != nil {
			return err
		}
	}
	if len(lx.GIDMappings) > 0 {
		if err := writeProc(dir+"gid_map", formatIDMap(lx.GIDMappings)); err != nil {
			return err
		}
	}
	return nil
}

func formatIDMap(ms []specs.LinuxIDMapping) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%d %d %d\n", m.ContainerID, m.HostID, m.Size)
	}
	return b.String()
}

// writeProc writes a /proc control file in one write, as the kernel wants.
func writeProc(name, data string) error {
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(data)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// cUserns returns an fd of a user namespace with the given maps, owned by
// a short-lived holder that the C side clones (no exec).
func cUserns(uids, gids []specs.LinuxIDMapping) (int, error) {
	var reaped sync.WaitGroup
	defer reaped.Wait()
	return usernsVia(cinit.UsernsHolder, uids, gids, &reaped)
}

// usernsVia is cUserns with the holder's start (cinit.UsernsHolder) as a
// parameter, so that a test can account for every holder's release. The
// holder is killed before it returns and reaped on a goroutine, which
// pending counts.
func usernsVia(holder func(pipeRead int) (int, func(), error), uids, gids []specs.LinuxIDMapping, pending *sync.WaitGroup) (int, error) {
	// The holder's parent death signal follows this thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, w, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("userns holder: %w", err)
	}
	defer w.Close()
	pid, reaped, err := holder(int(r.Fd()))
	r.Close()
	if err != nil {
		return -1, fmt.Errorf("userns holder: %w", err)
	}
	pending.Add(1)
	defer func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		// Reaped off the spawn's path.
		go func() {
			defer pending.Done()
			for {
				_, err := unix.Wait4(pid, nil, 0, nil)
				if errors.Is(err, unix.EINTR) {
					continue
				}
				if err == nil {
					reaped() // its stack; leaked if the pid was not ours to reap
				}
				return
			}
		}()
	}()
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	if err := writeProc(dir+"uid_map", formatIDMap(uids)); err != nil {
		return -1, fmt.Errorf("userns holder: %w", err)
	}
	if err := writeProc(dir+"gid_map", formatIDMap(gids)); err != nil {
		return -1, fmt.Errorf("userns holder: %w", err)
	}
	fd, err := unix.Open(dir+"ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open holder userns: %w", err)
	}
	return fd, nil
}

// stdio gives the child fds for Config's readers and writers the way
// os/exec does: *os.File as is, nil as /dev/null, anything else through a
// pipe and a copying goroutine.
type stdio struct {
	fds [3]int
	// childEnds are closed once the child holds its copies; parentEnds
	// once it is gone.
	childEnds  []*os.File
	parentEnds []*os.File
	copies     sync.WaitGroup
	mu         sync.Mutex
	copyErr    error
}

func newStdio(cfg *Config) (*stdio, error) {
	s := &stdio{}
	var err error
	if s.fds[0], err = s.input(cfg.Stdin); err != nil {
		s.closeAll()
		return nil, err
	}
	if s.fds[1], err = s.output(cfg.Stdout); err != nil {
		s.closeAll()
		return nil, err
	}
	if sameWriter(cfg.Stdout, cfg.Stderr) {
		// One pipe, one copier: two would race on the writer.
		s.fds[2] = s.fds[1]
		return s, nil
	}
	if s.fds[2], err = s.output(cfg.Stderr); err != nil {
		s.closeAll()
		return nil, err
	}
	return s, nil
}

func sameWriter(a, b io.Writer) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

func (s *stdio) input(r io.Reader) (int, error) {
	if f, ok := r.(*os.File); ok && f != nil {
		return int(f.Fd()), nil
	}
	if r == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return -1, err
		}
		s.childEnds = append(s.childEnds, f)
		return int(f.Fd()), nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	s.childEnds = append(s.childEnds, pr)
	s.parentEnds = append(s.parentEnds, pw)
	// Not waited for: a reader that never ends must not hold up Wait. The
	// copy stops with EPIPE once the sandbox is gone and pw closed.
	go func() {
		_, _ = io.Copy(pw, r)
		pw.Close()
	}()
	return int(pr.Fd()), nil
}

func (s *stdio) output(w io.Writer) (int, error) {
	if f, ok := w.(*os.File); ok && f != nil {
		return int(f.Fd()), nil
	}
	if w == nil {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return -1, err
		}
		s.childEnds = append(s.childEnds, f)
		return int(f.Fd()), nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	s.childEnds = append(s.childEnds, pw)
	fd := int(pw.Fd())
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		_, err := io.Copy(w, pr)
		pr.Close()
		if err != nil {
			s.mu.Lock()
			if s.copyErr == nil {
				s.copyErr = err
			}
			s.mu.Unlock()
		}
	}()
	return fd, nil
}

func (s *stdio) closeChildEnds() {
	for _, f := range s.childEnds {
		f.Close()
	}
	s.childEnds = nil
}

// closeAll undoes newStdio when no child was started.
func (s *stdio) closeAll() {
	s.closeChildEnds()
	for _, f := range s.parentEnds {
		f.Close()
	}
	s.copies.Wait()
}

// wait finishes the copies once the sandbox has ended and returns the first
// copy error.
func (s *stdio) wait() error {
	for _, f := range s.parentEnds {
		f.Close()
	}
	s.copies.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.copyErr
}
