//go:build linux

package cgroups

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentrun/agentrun/internal/procid"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentrun/agentrun/internal/statedir"
	"golang.org/x/sys/unix"
)

// record is the state kept per live cgroup so that a later runtime can
// clean up after one that was SIGKILLed.
type record struct {
	Version    int      `json:"version"`
	ID         string   `json:"id"`
	Parent     string   `json:"parent"`
	V2         bool     `json:"v2"`
	Paths      []string `json:"paths"`
	OwnerPID   int      `json:"owner_pid"`
	OwnerStart uint64   `json:"owner_start"`
	OwnerPidNS uint64   `json:"owner_pidns"`
	// Scope names the transient systemd scope holding the cgroup (rootless
	// v2 without delegation); Paths is empty until the sandbox's init was
	// placed in it.
	Scope string `json:"scope,omitempty"`
}

// defaultStateDir picks the record directory for euid (see Options).
func defaultStateDir(euid int) string {
	return filepath.Join(statedir.Root(euid), "cgroups")
}

// ensureStateDir creates the state directory private to the caller:
// records there steer what Sweep kills and removes.
func (m *Manager) ensureStateDir() error {
	if err := statedir.Ensure(m.stateDir, m.euid); err != nil {
		return fmt.Errorf("cgroups: state directory: %w", err)
	}
	return nil
}

// writeRecord stores rec and returns its path. One O_EXCL create and one
// small write: a concurrent Sweep may see the file empty for an instant,
// which it tolerates (see sweepOne); the exclusive create also refuses an
// id that is in use.
func (m *Manager) writeRecord(rec record) (string, error) {
	if err := m.ensureStateDir(); err != nil {
		return "", err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("cgroups: record: %w", err)
	}
	path := filepath.Join(m.stateDir, rec.ID+".json")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("cgroups: sandbox id %q already has a state record %s", rec.ID, path)
		}
		return "", fmt.Errorf("cgroups: record: %w", err)
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("cgroups: record: %w", err)
	}
	return path, nil
}

// rewriteRecord replaces the record at path with rec, atomically: a
// concurrent Sweep reads the old or the new one, never a torn one.
func (m *Manager) rewriteRecord(path string, rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("cgroups: record: %w", err)
	}
	tmp := path + ".tmp" // not *.json: Sweep skips it
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("cgroups: record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cgroups: record: %w", err)
	}
	return nil
}

// Sweep removes the cgroups of runtimes that died without cleaning up: for
// every record whose owner process is gone, and every express cgroup
// (below) whose owner is gone, it kills what is left inside and removes
// the directories and the record. Call it before each spawn; with nothing
// to sweep it costs a directory read or two. removed counts cgroups swept;
// err joins the failures, which do not stop the sweep.
func (m *Manager) Sweep() (removed int, err error) {
	n, err := m.sweepRecords()
	x, xerr := m.sweepExpress()
	return n + x, errors.Join(err, xerr)
}

func (m *Manager) sweepRecords() (removed int, err error) {
	ents, err := os.ReadDir(m.stateDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("cgroups: sweep: %w", err)
	}
	if len(ents) == 0 {
		return 0, nil
	}
	if err := statedir.Private(m.stateDir, m.euid); err != nil {
		return 0, fmt.Errorf("cgroups: sweep: %w", err)
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		ok, err := m.sweepOne(filepath.Join(m.stateDir, name))
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// ExpressPrefix starts the name of a cgroup the express path made
// (cmd/agentrun/internal/fastpath/express.c): sbe-PID-START-PIDNS-RANDOM, with the
// owner's pid, its /proc/PID/stat start time and the inode of its PID
// namespace in decimal, and 16 hex digits. It has no state record: the
// name is the record, so that the express path writes no file per spawn.
const ExpressPrefix = "sbe-"

// ParseExpressName returns what an express cgroup's name says of its
// owner, and whether name is one. The express path's C reading of a name
// (nsinit/internal/cinit) must accept exactly the same names.
func ParseExpressName(name string) (pid int, start, pidns uint64, ok bool) {
	o, ok := parseExpressID(name)
	return o.pid, o.start, o.pidns, ok
}

// parseExpressID returns the owner an express cgroup's name gives, and
// whether name is one.
func parseExpressID(name string) (owner, bool) {
	rest, ok := strings.CutPrefix(name, ExpressPrefix)
	if !ok {
		return owner{}, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 4 || len(f[3]) != 16 {
		return owner{}, false
	}
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return owner{}, false
		}
		v[i] = n
	}
	if _, err := strconv.ParseUint(f[3], 16, 64); err != nil || f[3] != strings.ToLower(f[3]) {
		return owner{}, false
	}
	if v[0] == 0 || v[0] > math.MaxInt32 {
		return owner{}, false
	}
	return owner{pid: int(v[0]), start: v[1], pidns: v[2]}, true
}

// ownsDir reports whether path is a directory the caller made (cgroupfs
// gives a new cgroup its creator's uid). Another user's express cgroups
// are not the caller's to judge, as their state records would not be:
// that user's /proc entries may not even be readable.
func (m *Manager) ownsDir(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == m.euid
}

// sweepExpress removes the express cgroups whose owner is gone. The express
// path makes them on v1 hosts only, in the pids hierarchy, in agentrun's
// parent below the caller's cgroup, as Create would.
func (m *Manager) sweepExpress() (removed int, err error) {
	if !m.lay.useV1 {
		return 0, nil
	}
	var errs []error
	for _, h := range m.lay.v1 {
		if !h.has(Pids) || m.v1Problem(h) != nil {
			continue
		}
		dir := filepath.Join(h.caller, m.parent)
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("cgroups: sweep: %w", err))
			}
			continue
		}
		for _, e := range ents {
			o, ok := parseExpressID(e.Name())
			if !ok || !e.IsDir() || !m.ownsDir(filepath.Join(dir, e.Name())) {
				continue
			}
			rec := record{ID: e.Name(), OwnerPID: o.pid, OwnerStart: o.start, OwnerPidNS: o.pidns}
			if m.ownerAlive(rec) {
				continue
			}
			leaf := filepath.Join(dir, e.Name())
			cg := &Cgroup{id: e.Name(), fd: -1, log: m.log,
				dirs: []cgDir{{parent: dir, leaf: leaf, controllers: h.controllers}}}
			m.log.Info("cgroups: sweeping express cgroup of a dead runtime", "id", e.Name(), "owner_pid", o.pid, "path", leaf)
			if err := cg.Delete(); err != nil {
				errs = append(errs, fmt.Errorf("cgroups: sweep %s: %w", e.Name(), err))
				continue
			}
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

func (m *Manager) sweepOne(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil // swept concurrently
		}
		return false, fmt.Errorf("cgroups: sweep: %w", err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil || rec.Version != 1 {
		// Being written right now, or left half-written by a crash: the
		// cgroup directories are only made after the record is complete,
		// so an old unreadable record guards nothing.
		if fi, err := os.Lstat(path); err == nil && time.Since(fi.ModTime()) > time.Minute {
			m.log.Warn("cgroups: removing unreadable state record", "path", path)
			os.Remove(path)
		}
		return false, nil
	}
	if m.ownerAlive(rec) {
		return false, nil
	}
	if err := m.validRecord(rec); err != nil {
		return false, fmt.Errorf("cgroups: sweep: %s: %w", path, err)
	}
	cg := &Cgroup{id: rec.ID, v2: rec.V2, fd: -1, log: m.log, record: path}
	for _, p := range rec.Paths {
		cg.dirs = append(cg.dirs, cgDir{parent: filepath.Dir(p), leaf: p, controllers: m.controllersAt(p)})
	}
	if rec.Scope != "" {
		// The dead runtime may or may not have got its scope started.
		cg.scope = &scope{m: m, unit: rec.Scope, rec: rec, started: true}
	}
	m.log.Info("cgroups: sweeping cgroup of a dead runtime", "id", rec.ID, "owner_pid", rec.OwnerPID, "paths", rec.Paths, "scope", rec.Scope)
	if err := cg.Delete(); err != nil {
		return false, fmt.Errorf("cgroups: sweep %s: %w", rec.ID, err)
	}
	return true, nil
}

// ownerAlive reports whether the owner pid still runs the same process
// (same start time, not exited). A record from another pid namespace cannot be
// judged and counts as alive.
func (m *Manager) ownerAlive(rec record) bool {
	if rec.OwnerPidNS != m.self.pidns {
		return true
	}
	if rec.OwnerPID == m.self.pid {
		return rec.OwnerStart == m.self.start
	}
	// procid.Alive also takes a zombie for gone: an owner killed with
	// SIGKILL may wait seconds for its reaper, and holds nothing.
	return procid.ID{PID: rec.OwnerPID, Start: rec.OwnerStart, PidNS: rec.OwnerPidNS}.Alive()
}

// validRecord refuses records that would make Sweep kill or remove anything
// but a sandbox cgroup: each path must be <cgroup mount>/…/<parent>/<id>.
func (m *Manager) validRecord(rec record) error {
	if validID(rec.ID) != nil || validID(rec.Parent) != nil {
		return errors.New("malformed record")
	}
	// A sandbox cgroup is <base>/<parent>/<id>, or <scope>/<id> inside
	// the sandbox's own transient scope, which may not exist yet.
	parent := rec.Parent
	switch {
	case rec.Scope != "":
		if rec.Scope != scopeUnit(rec.ID) || !rec.V2 {
			return fmt.Errorf("scope %q is not the sandbox's", rec.Scope)
		}
		parent = rec.Scope
	case len(rec.Paths) == 0:
		return errors.New("malformed record")
	}
	for _, p := range rec.Paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || filepath.Base(p) != rec.ID ||
			filepath.Base(filepath.Dir(p)) != parent || !m.underCgroupMount(p, rec.V2) {
			return fmt.Errorf("path %q is not a sandbox cgroup", p)
		}
	}
	return nil
}

func (m *Manager) underCgroupMount(p string, v2 bool) bool {
	under := func(mount string) bool { return strings.HasPrefix(p, mount+"/") }
	if v2 {
		return m.lay.v2 != nil && under(m.lay.v2.mount)
	}
	for _, h := range m.lay.v1 {
		if under(h.mount) {
			return true
		}
	}
	return false
}

// controllersAt names the v1 controllers of the hierarchy holding p, so a
// swept cgroup can still be frozen.
func (m *Manager) controllersAt(p string) []string {
	for _, h := range m.lay.v1 {
		if strings.HasPrefix(p, h.mount+"/") {
			return h.controllers
		}
	}
	return nil
}
