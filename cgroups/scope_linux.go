//go:build linux

package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/sdbus"
	"golang.org/x/sys/unix"
)

// Rootless on unified v2 without a delegated cgroup of its own, agentrun
// asks the caller's systemd user manager for one: a transient scope
// agentrun-<id>.scope with Delegate=yes. A scope cannot be empty, and the
// process that fills it must not be the caller (a library user's whole
// process would end up in the sandbox's cgroup), so the scope is created
// for the sandbox init's pid at the point where v1 and the clone3
// fallback place it (Cgroup.Add, while the init waits at its sync point
// and runs no user code):
//
//  1. StartTransientUnit(agentrun-<id>.scope, PIDs=[init], Delegate=yes)
//     and wait for its JobRemoved with result "done";
//  2. find the scope's directory from /proc/<init>/cgroup;
//  3. mkdir <scope>/<id> and move the init there, so the scope itself
//     holds no process and may enable controllers for its children (the
//     v2 no-internal-process rule);
//  4. enable memory/pids/cpu in <scope>/cgroup.subtree_control and write
//     the limits into <scope>/<id>.
//
// Only then is the init released. Delete removes the leaf and stops the
// scope; a state record names the scope, so Sweep stops one left by a
// runtime killed with SIGKILL.

// DefaultSystemdTimeout bounds each conversation with the systemd user
// manager (connect, start the scope and wait for its job; or stop it).
const DefaultSystemdTimeout = 10 * time.Second

// scopeUnit is the name of the transient scope for sandbox id.
func scopeUnit(id string) string { return "agentrun-" + id + ".scope" }

// scopePlan is the part of a plan that goes through a transient scope.
type scopePlan struct {
	conn    *sdbus.Manager // open from plan until Add
	manager string         // the user manager's cgroup directory
}

// scope is a Cgroup's transient-scope state.
type scope struct {
	m    *Manager
	unit string
	rec  record // rewritten with the leaf's path once it exists
	l    limits
	req  []string
	want []string
	// conn comes from plan and is used (and closed) by the first Add.
	conn *sdbus.Manager
	// started: StartTransientUnit was accepted (or, swept, may have been),
	// so the unit must be stopped.
	started bool
}

// close releases a plan's open connection (Check and Info never use it).
func (p plan) close() {
	if p.scope != nil && p.scope.conn != nil {
		p.scope.conn.Close()
	}
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
// that req needs. The plan holds the open connection.
func (m *Manager) planScope(req []string, base string) (plan, error) {
	if _, ok := sdbus.Reachable(m.sdEndpoints); !ok {
		where := ""
		if len(m.sdEndpoints) > 0 {
			where = " (no socket at " + m.sdEndpoints[0].Path + ")"
		}
		return plan{}, unusable(ErrNoDelegation, m.noScopeMsg(base, "no systemd user manager is reachable"+where))
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.sdTimeout)
	defer cancel()
	conn, err := sdbus.DialManager(ctx, m.sdEndpoints, m.euid)
	if err != nil {
		return plan{}, unusable(ErrNoDelegation, m.noScopeMsg(base, fmt.Sprintf("the systemd user manager does not answer (%v)", err)))
	}
	fail := func(err error) (plan, error) {
		conn.Close()
		return plan{}, err
	}
	cg, err := conn.ControlGroup(ctx)
	if err != nil {
		return fail(unusable(ErrNoDelegation, m.noScopeMsg(base, fmt.Sprintf("the systemd user manager does not say where its cgroup is (%v)", err))))
	}
	dir, err := m.v2Dir(cg)
	if err != nil {
		return fail(unusable(ErrNoDelegation, m.noScopeMsg(base, fmt.Sprintf("the systemd user manager's %v", err))))
	}
	if err := writable(filepath.Join(dir, "cgroup.subtree_control")); err != nil {
		return fail(unusable(ErrNoDelegation, m.noScopeMsg(base,
			fmt.Sprintf("the systemd user manager's own cgroup %s is not delegated to it (Delegate=yes on user@.service)", dir))))
	}
	avail, err := readList(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fail(fmt.Errorf("cgroups: %w", err))
	}
	if missing := without(req, avail); len(missing) > 0 {
		return fail(unusable(ErrNoController, fmt.Sprintf(
			"the cgroup v2 %s controller is not delegated to the systemd user manager (%s has: %s): add it with a drop-in for user@.service (systemctl edit user@.service: [Service] Delegate=pids memory cpu)",
			missing[0], dir, orNone(avail))))
	}
	d := planDir{base: dir}
	for _, c := range v2Wanted() {
		if slices.Contains(avail, c) {
			d.controllers = append(d.controllers, c)
		}
	}
	return plan{v2: true, req: req, dirs: []planDir{d}, scope: &scopePlan{conn: conn, manager: dir}}, nil
}

// createScope is Create for a plan through a transient scope: it records
// the scope for Sweep and defers everything else to Add, which gets the
// init's pid.
func (m *Manager) createScope(id string, p plan, l limits) (*Cgroup, error) {
	unit := scopeUnit(id)
	rec := record{
		Version: 1, ID: id, Parent: m.parent, V2: true, Scope: unit,
		OwnerPID: m.self.pid, OwnerStart: m.self.start, OwnerPidNS: m.self.pidns,
	}
	recPath, err := m.writeRecord(rec)
	if err != nil {
		p.close()
		return nil, err
	}
	cg := &Cgroup{id: id, v2: true, fd: -1, log: m.log, record: recPath}
	cg.scope = &scope{
		m: m, unit: unit, rec: rec, l: l, req: p.req, want: p.dirs[0].controllers,
		conn: p.scope.conn,
	}
	return cg, nil
}

// placeInScope is Add's first call for a scope-backed cgroup.
func (c *Cgroup) placeInScope(pid int) error {
	s := c.scope
	conn := s.conn
	s.conn = nil
	if conn == nil {
		return fmt.Errorf("cgroups: scope %s: placement already attempted", s.unit)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), s.m.sdTimeout)
	defer cancel()
	if err := conn.Subscribe(ctx); err != nil {
		return fmt.Errorf("cgroups: systemd user manager: %w", err)
	}
	props := []sdbus.Property{
		{Name: "Description", Value: sdbus.Variant{Sig: "s", Value: "agentrun sandbox " + c.id}},
		{Name: "PIDs", Value: sdbus.Variant{Sig: "au", Value: []uint32{uint32(pid)}}},
		{Name: "Delegate", Value: sdbus.Variant{Sig: "b", Value: true}},
		// Unloaded once stopped, failed or not, so no unit lingers.
		{Name: "CollectMode", Value: sdbus.Variant{Sig: "s", Value: "inactive-or-failed"}},
		// Stopping the scope (Delete, Sweep, a user's systemctl stop)
		// kills at once, as agentrun's own kill does.
		{Name: "KillSignal", Value: sdbus.Variant{Sig: "i", Value: int32(unix.SIGKILL)}},
	}
	job, err := conn.StartTransientUnit(ctx, s.unit, "fail", props)
	var refused *sdbus.Error
	switch {
	case errors.As(err, &refused):
		return unusable(ErrNoDelegation, fmt.Sprintf(
			"the systemd user manager refused the Delegate=yes scope for the sandbox's cgroup (%v): run agentrun under systemd-run --user --scope -p Delegate=yes instead", refused))
	case err != nil:
		// No answer: the unit may exist all the same, so Delete stops it.
		s.started = true
		return fmt.Errorf("cgroups: systemd user manager: %w", err)
	}
	s.started = true
	result, err := conn.WaitJob(ctx, job)
	if err != nil {
		return fmt.Errorf("cgroups: systemd user manager: scope %s: %w", s.unit, err)
	}
	if result != "done" {
		return unusable(ErrNoDelegation, fmt.Sprintf(
			"the systemd user manager could not start scope %s for the sandbox's cgroup (job %s; see journalctl --user -u %[1]s): run agentrun under systemd-run --user --scope -p Delegate=yes instead", s.unit, result))
	}
	dir, err := c.scopeDir(pid)
	if err != nil {
		return err
	}
	avail, err := readList(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if missing := without(s.req, avail); len(missing) > 0 {
		return unusable(ErrNoController, fmt.Sprintf(
			"the systemd user manager delegated no %s controller to scope %s (it has: %s): add it with a drop-in for user@.service (systemctl edit user@.service: [Service] Delegate=pids memory cpu)",
			missing[0], s.unit, orNone(avail)))
	}
	var ctl []string
	for _, x := range s.want {
		if slices.Contains(avail, x) {
			ctl = append(ctl, x)
		}
	}
	leaf := filepath.Join(dir, c.id)
	// The record learns the leaf before it exists: Sweep tolerates a
	// missing directory, not an unrecorded one.
	s.rec.Paths = []string{leaf}
	if err := s.m.rewriteRecord(c.record, s.rec); err != nil {
		return err
	}
	if err := unix.Mkdir(leaf, 0o755); err != nil {
		return fmt.Errorf("cgroups: %w", &fs.PathError{Op: "mkdir", Path: leaf, Err: err})
	}
	c.dirs = []cgDir{{controllers: ctl, parent: dir, leaf: leaf}}
	if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("cgroups: add pid %d: %w", pid, err)
	}
	if err := s.m.enableV2(dir, ctl, s.req, false); err != nil {
		return err
	}
	return c.apply(s.l)
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
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	if !s.started {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.m.sdTimeout)
	defer cancel()
	conn, err := sdbus.DialManager(ctx, s.m.sdEndpoints, s.m.euid)
	if err != nil {
		log("cgroups: cannot reach the systemd user manager to stop the scope", "unit", s.unit, "err", err)
		s.started = false
		return nil
	}
	defer conn.Close()
	if err := conn.Subscribe(ctx); err != nil {
		return fmt.Errorf("cgroups: stop %s: %w", s.unit, err)
	}
	job, err := conn.StopUnit(ctx, s.unit, "replace")
	if sdbus.IsNoSuchUnit(err) {
		s.started = false
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	result, err := conn.WaitJob(ctx, job)
	if err != nil {
		return fmt.Errorf("cgroups: stop %s: %w", s.unit, err)
	}
	if result != "done" {
		return fmt.Errorf("cgroups: stop %s: job %s", s.unit, result)
	}
	s.started = false
	return nil
}
