//go:build linux

package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/sdbus"
	"golang.org/x/sys/unix"
)

// Rootless on unified v2 without a delegated cgroup of its own, agentrun
// asks the caller's systemd user manager for one: a transient scope
// agentrun-<id>.scope with Delegate=yes. A scope must be created with a
// process in it and is stopped, its cgroup removed, the moment it has none
// left. Neither the caller (a library user's whole process would land in
// the sandbox's cgroup) nor the sandbox's init (when it exits, systemd
// would remove the cgroup before its OOM and peak counters are read) can
// be that process, so Create starts a holder of its own
// (Options.ScopeHolder: this binary re-executed, blocking on a pipe):
//
//  1. StartTransientUnit(agentrun-<id>.scope, PIDs=[holder], Delegate=yes,
//     CollectMode=inactive-or-failed, KillSignal=SIGKILL) and wait for its
//     JobRemoved with result "done";
//  2. find the scope's directory from /proc/<holder>/cgroup and check the
//     controllers the limits need were delegated to it;
//  3. move the holder into <scope>/.hold, so the scope itself holds no
//     process and may enable controllers for its children (the v2
//     no-internal-process rule), and enable them;
//  4. create <scope>/<id> with the limits: the sandbox's cgroup.
//
// The caller sits outside the scope, in a cgroup it may not write, and
// moving a process needs write access to the common ancestor of both
// cgroups: neither CLONE_INTO_CGROUP nor a write to cgroup.procs can put
// the sandbox's init there (FD is -1). Add asks the user manager instead
// (AttachProcessesToUnit with the sub-cgroup /<id>), which has the system
// manager do it, while the init waits at its sync point.
//
// Delete removes the sandbox's cgroup, lets the holder go and stops the
// scope. A runtime killed with SIGKILL closes the holder's pipe by dying,
// so the scope empties and systemd stops it; its state record also names
// the scope, so the next Sweep stops it for certain.

// All of a Manager's goroutines share one connection to the user manager
// (Manager.sd, an sdbus.Client), opened on first use and closed once
// unused for a second: each connection costs the manager a handshake
// and, on its private socket, a copy of every signal it sends while the
// connection is open.

// DefaultSystemdTimeout bounds the user manager's answer to one request
// (connect, start or stop the scope, move a process, read a property),
// counted from when the request is sent, and the wait for one job. An
// operation, with its repeated requests and its wait behind other
// goroutines' requests, gets sdOpFactor times as long.
const DefaultSystemdTimeout = 10 * time.Second

// sdOpFactor is how many request timeouts one operation may take.
const sdOpFactor = 3

// sdContext bounds one operation with the user manager.
func (m *Manager) sdContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), sdOpFactor*m.sdTimeout)
}

// scopeUnit is the name of the transient scope for sandbox id.
func scopeUnit(id string) string { return "agentrun-" + id + ".scope" }

// scopePlan is the part of a plan that goes through a transient scope.
type scopePlan struct {
	manager string // the user manager's cgroup directory
}

// scope is a Cgroup's transient-scope state.
type scope struct {
	m    *Manager
	unit string
	rec  record // rewritten with the leaf's path once it exists
	// hold keeps the scope populated; closing holdW ends it.
	hold  *exec.Cmd
	holdW *os.File
	// started: StartTransientUnit was accepted (or, swept, may have been),
	// so the unit must be stopped.
	started bool
}

// noScopeMsg is the refusal for a rootless caller on v2 whose cgroup is
// not delegated when no transient scope can be had either.
func (m *Manager) noScopeMsg(base, why string) string {
	return fmt.Sprintf("cgroup v2 subtree %s is not writable by uid %d and %s: start a systemd user manager (loginctl enable-linger, or log in through pam_systemd) so agentrun can request a Delegate=yes scope, run it under systemd-run --user --scope -p Delegate=yes agentrun …, or ask root to chown that cgroup and its cgroup.procs, cgroup.subtree_control and cgroup.threads to you",
		base, m.euid, why)
}

// v2Dir maps a cgroup path as the kernel or systemd names it to its
// directory under the cgroup2 mount.
func (m *Manager) v2Dir(cg string) (string, error) {
	h := m.lay.v2
	rel, ok := relativeTo(h.root, cg)
	if !ok {
		return "", fmt.Errorf("cgroups: cgroup %s is not visible under %s", cg, h.mount)
	}
	return filepath.Join(h.mount, rel), nil
}

// planScope plans a sandbox cgroup inside a transient scope of the user
// manager. It checks what it can before anything exists: the manager
// answers, its own cgroup is delegated to it, and it has the controllers
// that req needs.
func (m *Manager) planScope(req []string, base string) (plan, error) {
	if _, ok := sdbus.Reachable(m.sdEndpoints); !ok {
		where := ""
		if len(m.sdEndpoints) > 0 {
			where = " (no socket at " + m.sdEndpoints[0].Path + ")"
		}
		return plan{}, unusable(ErrNoDelegation, m.noScopeMsg(base, "no systemd user manager is reachable"+where))
	}
	ctx, cancel := m.sdContext()
	defer cancel()
	cg, err := m.sd.ControlGroup(ctx)
	if errors.Is(err, sdbus.ErrNoManager) {
		return plan{}, unusable(ErrNoDelegation, m.noScopeMsg(base, fmt.Sprintf("the systemd user manager does not answer (%v)", err)))
	}
	if err != nil {
		return plan{}, unusable(ErrNoDelegation, m.noScopeMsg(base, fmt.Sprintf("the systemd user manager does not say where its cgroup is (%v)", err)))
	}
	dir, err := m.v2Dir(cg)
	if err != nil {
		return plan{}, unusable(ErrNoDelegation, m.noScopeMsg(base, fmt.Sprintf("the systemd user manager's %v", err)))
	}
	if err := writable(filepath.Join(dir, "cgroup.subtree_control")); err != nil {
		return plan{}, unusable(ErrNoDelegation, m.noScopeMsg(base,
			fmt.Sprintf("the systemd user manager's own cgroup %s is not delegated to it (Delegate=yes on user@.service)", dir)))
	}
	avail, err := readList(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return plan{}, fmt.Errorf("cgroups: %w", err)
	}
	if missing := without(req, avail); len(missing) > 0 {
		return plan{}, unusable(ErrNoController, fmt.Sprintf(
			"the cgroup v2 %s controller is not delegated to the systemd user manager (%s has: %s): add it with a drop-in for user@.service (systemctl edit user@.service: [Service] Delegate=pids memory cpu)",
			missing[0], dir, orNone(avail)))
	}
	d := planDir{base: dir}
	for _, c := range v2Wanted() {
		if slices.Contains(avail, c) {
			d.controllers = append(d.controllers, c)
		}
	}
	return plan{v2: true, req: req, dirs: []planDir{d}, scope: &scopePlan{manager: dir}}, nil
}

// holdLeaf is the holder's cgroup inside the scope; validID never makes
// a sandbox id start with a dot, so it cannot collide.
const holdLeaf = ".hold"

// createScope is Create for a plan through a transient scope.
func (m *Manager) createScope(id string, p plan, l limits) (_ *Cgroup, err error) {
	if m.holder == nil {
		return nil, unusable(ErrNoDelegation, m.noScopeMsg(p.scope.manager, "no scope holder process is configured (cgroups.Options.ScopeHolder)"))
	}
	unit := scopeUnit(id)
	rec := record{
		Version: 1, ID: id, Parent: m.parent, V2: true, Scope: unit,
		OwnerPID: m.self.pid, OwnerStart: m.self.start, OwnerPidNS: m.self.pidns,
	}
	recPath, err := m.writeRecord(rec)
	if err != nil {
		return nil, err
	}
	cg := &Cgroup{id: id, v2: true, fd: -1, log: m.log, record: recPath, callerHash: m.pcHash}
	s := &scope{m: m, unit: unit, rec: rec}
	cg.scope = s
	defer func() {
		if err != nil {
			if derr := cg.Delete(); derr != nil {
				m.log.Warn("cgroups: cleanup after failed create", "id", id, "err", derr)
			}
		}
	}()
	if err := s.startHolder(); err != nil {
		return nil, err
	}
	props := []sdbus.Property{
		{Name: "Description", Value: sdbus.Variant{Sig: "s", Value: "agentrun sandbox " + id}},
		{Name: "PIDs", Value: sdbus.Variant{Sig: "au", Value: []uint32{uint32(s.hold.Process.Pid)}}},
		{Name: "Delegate", Value: sdbus.Variant{Sig: "b", Value: true}},
		// Unloaded once stopped, failed or not, so no unit lingers.
		{Name: "CollectMode", Value: sdbus.Variant{Sig: "s", Value: "inactive-or-failed"}},
		// Stopping the scope (Delete, Sweep, a user's systemctl stop)
		// kills at once, as agentrun's own kill does.
		{Name: "KillSignal", Value: sdbus.Variant{Sig: "i", Value: int32(unix.SIGKILL)}},
	}
	ctx, cancel := m.sdContext()
	defer cancel()
	result, err := m.sd.StartTransientUnit(ctx, unit, props)
	var refused *sdbus.Error
	switch {
	case errors.As(err, &refused):
		return nil, unusable(ErrNoDelegation, fmt.Sprintf(
			"the systemd user manager refused the Delegate=yes scope for the sandbox's cgroup (%v): run agentrun under systemd-run --user --scope -p Delegate=yes instead", refused))
	case err != nil:
		// No answer: the unit may exist all the same, so Delete stops it.
		s.started = true
		return nil, fmt.Errorf("cgroups: systemd user manager: scope %s: %w", unit, err)
	}
	s.started = true
	if result != "done" {
		return nil, unusable(ErrNoDelegation, fmt.Sprintf(
			"the systemd user manager could not start scope %s for the sandbox's cgroup (job %s; see journalctl --user -u %[1]s): run agentrun under systemd-run --user --scope -p Delegate=yes instead", unit, result))
	}
	dir, err := cg.scopeDir(s.hold.Process.Pid)
	if err != nil {
		return nil, err
	}
	avail, err := readList(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	if missing := without(p.req, avail); len(missing) > 0 {
		return nil, unusable(ErrNoController, fmt.Sprintf(
			"the systemd user manager delegated no %s controller to scope %s (it has: %s): add it with a drop-in for user@.service (systemctl edit user@.service: [Service] Delegate=pids memory cpu)",
			missing[0], unit, orNone(avail)))
	}
	var ctl []string
	for _, x := range p.dirs[0].controllers {
		if slices.Contains(avail, x) {
			ctl = append(ctl, x)
		}
	}
	hold := filepath.Join(dir, holdLeaf)
	if err := unix.Mkdir(hold, 0o755); err != nil {
		return nil, fmt.Errorf("cgroups: %w", &fs.PathError{Op: "mkdir", Path: hold, Err: err})
	}
	if err := writeFile(filepath.Join(hold, "cgroup.procs"), strconv.Itoa(s.hold.Process.Pid)); err != nil {
		return nil, fmt.Errorf("cgroups: move the scope's holder: %w", err)
	}
	if err := m.enableV2(dir, ctl, p.req, false); err != nil {
		return nil, err
	}
	leaf := filepath.Join(dir, id)
	// The record learns the leaf before it exists: Sweep tolerates a
	// missing directory, not an unrecorded one.
	s.rec.Paths = []string{leaf}
	if err := m.rewriteRecord(recPath, s.rec); err != nil {
		return nil, err
	}
	if err := unix.Mkdir(leaf, 0o755); err != nil {
		return nil, fmt.Errorf("cgroups: %w", &fs.PathError{Op: "mkdir", Path: leaf, Err: err})
	}
	cg.dirs = []cgDir{{controllers: ctl, parent: dir, leaf: leaf}}
	if err := cg.apply(l); err != nil {
		return nil, err
	}
	return cg, nil
}

// attach has the user manager move pid into the sandbox's cgroup and
// checks that it got there.
func (s *scope) attach(id string, pid int) error {
	ctx, cancel := s.m.sdContext()
	defer cancel()
	if err := s.m.sd.AttachProcessesToUnit(ctx, s.unit, "/"+id, []uint32{uint32(pid)}); err != nil {
		return fmt.Errorf("cgroups: add pid %d: the systemd user manager could not move it into its scope: %w", pid, err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return fmt.Errorf("cgroups: add pid %d: %w", pid, err)
	}
	if !strings.Contains(string(b), "/"+s.unit+"/"+id+"\n") {
		return fmt.Errorf("cgroups: add pid %d: it is in %q after AttachProcessesToUnit, not in %s/%s", pid, strings.TrimSpace(string(b)), s.unit, id)
	}
	return nil
}

// startHolder starts the scope's holder with a pipe as its stdin; closing
// the write end (or this process dying) ends it.
func (s *scope) startHolder() error {
	cmd := s.m.holder()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("cgroups: scope holder: %w", err)
	}
	defer r.Close()
	cmd.Stdin = r
	if cmd.Env == nil {
		cmd.Env = []string{} // nothing of the caller's environment
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("cgroups: scope holder: %w", err)
	}
	s.hold, s.holdW = cmd, w
	return nil
}

// endHolder lets the holder go and reaps it.
func (s *scope) endHolder() {
	if s.hold == nil {
		return
	}
	s.holdW.Close()
	done := make(chan struct{})
	go func() {
		_ = s.hold.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_ = s.hold.Process.Kill()
		<-done
	}
	s.hold = nil
}

// scopeDir finds the scope's directory through the cgroup the manager put
// pid in, and checks that it is the scope asked for.
func (c *Cgroup) scopeDir(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", fmt.Errorf("cgroups: %w", err)
	}
	var cg string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			cg = p
		}
	}
	if filepath.Base(cg) != c.scope.unit {
		return "", fmt.Errorf("cgroups: scope %s started, but process %d is in cgroup %q", c.scope.unit, pid, cg)
	}
	return c.scope.m.v2Dir(cg)
}

// stopScope stops the transient scope and waits for the job. The unit
// already gone counts as stopped. With no manager to reach there is no
// scope left to stop (it lives and dies with its manager).
func (s *scope) stop(log func(msg string, args ...any)) error {
	s.endHolder()
	if !s.started || s.m.sd == nil {
		return nil // not started, or not rootless: no user manager's unit
	}
	ctx, cancel := s.m.sdContext()
	defer cancel()
	err := s.m.sd.StopUnit(ctx, s.unit)
	if errors.Is(err, sdbus.ErrNoManager) {
		log("cgroups: cannot reach the systemd user manager to stop the scope", "unit", s.unit, "err", err)
		s.started = false
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroups: stop %s: %w", s.unit, err)
	}
	s.started = false
	return nil
}
