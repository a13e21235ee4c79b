package sdbus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// systemd's D-Bus names.
const (
	systemdName    = "org.freedesktop.systemd1"
	systemdPath    = ObjectPath("/org/freedesktop/systemd1")
	managerIface   = "org.freedesktop.systemd1.Manager"
	propertiesFace = "org.freedesktop.DBus.Properties"

	// ErrNoSuchUnit is the error name for a unit that is not loaded.
	ErrNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
	// ErrUnitExists is the error name for starting a unit that is loaded.
	ErrUnitExists        = "org.freedesktop.systemd1.UnitExists"
	errAlreadySubscribed = "org.freedesktop.systemd1.AlreadySubscribed"
	unitIface            = "org.freedesktop.systemd1.Unit"
)

// ErrNoManager is wrapped when no systemd user manager can be reached.
var ErrNoManager = errors.New("sdbus: no systemd user manager reachable")

// Endpoint is one way to reach the user manager.
type Endpoint struct {
	Path string // unix socket
	Bus  bool   // a bus daemon (Hello, AddMatch) rather than systemd itself
}

// UserManagerEndpoints lists, in the order runc and crun try them, where
// the user manager of uid may listen, given the environment lookup getenv:
// its private socket $XDG_RUNTIME_DIR/systemd/private (peer-to-peer, no
// bus daemon in between), then the session bus from
// $DBUS_SESSION_BUS_ADDRESS (unix:path= entries only) or
// $XDG_RUNTIME_DIR/bus. XDG_RUNTIME_DIR defaults to /run/user/UID.
func UserManagerEndpoints(getenv func(string) string, uid int) []Endpoint {
	rt := getenv("XDG_RUNTIME_DIR")
	if !filepath.IsAbs(rt) {
		rt = "/run/user/" + strconv.Itoa(uid)
	}
	eps := []Endpoint{{Path: filepath.Join(rt, "systemd", "private")}}
	var bus []string
	if addr := getenv("DBUS_SESSION_BUS_ADDRESS"); addr != "" {
		bus = unixPaths(addr)
	} else {
		bus = []string{filepath.Join(rt, "bus")}
	}
	for _, p := range bus {
		eps = append(eps, Endpoint{Path: p, Bus: true})
	}
	return eps
}

// unixPaths extracts the socket paths of the unix:path= entries of a D-Bus
// address list ("unix:path=/run/user/1000/bus;unix:abstract=x,guid=…").
// Abstract sockets and other transports are skipped.
func unixPaths(addrs string) []string {
	var out []string
	for _, a := range strings.Split(addrs, ";") {
		kind, params, ok := strings.Cut(a, ":")
		if !ok || kind != "unix" {
			continue
		}
		for _, kv := range strings.Split(params, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if k != "path" {
				continue
			}
			// Values are URI-style escaped.
			if p, err := url.PathUnescape(v); err == nil && filepath.IsAbs(p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// Reachable returns the first endpoint whose socket exists, without
// connecting.
func Reachable(eps []Endpoint) (Endpoint, bool) {
	for _, e := range eps {
		if fi, err := os.Stat(e.Path); err == nil && fi.Mode().Type() == os.ModeSocket {
			return e, true
		}
	}
	return Endpoint{}, false
}

// Manager is a connection to a systemd manager. It is safe for
// concurrent use.
type Manager struct {
	c  *Conn
	ep Endpoint

	mu sync.Mutex
	// removed holds the results of JobRemoved signals not yet claimed by
	// WaitJob, by job; order is their arrival, for dropping the oldest
	// beyond maxRemoved (other clients' jobs nobody here waits for).
	removed map[ObjectPath]string
	order   []ObjectPath
	// jobDone is closed, and replaced, at each JobRemoved.
	jobDone chan struct{}
}

const maxRemoved = 1024

// DialManager connects to the first endpoint that answers. The error of
// each attempt is kept; all failing wraps ErrNoManager.
func DialManager(ctx context.Context, eps []Endpoint, uid int) (*Manager, error) {
	var errs []error
	for _, e := range eps {
		c, err := Dial(ctx, e.Path, uid, e.Bus)
		if err == nil {
			m := &Manager{c: c, ep: e, removed: map[ObjectPath]string{}, jobDone: make(chan struct{})}
			c.OnSignal(m.signal)
			return m, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", e.Path, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w: %w", ErrNoManager, errors.Join(errs...))
}

// Endpoint is where the manager was reached.
func (m *Manager) Endpoint() Endpoint { return m.ep }

// Close closes the connection.
func (m *Manager) Close() error { return m.c.Close() }

// Err is nil while the connection is usable, then why it is not.
func (m *Manager) Err() error { return m.c.Err() }

func (m *Manager) call(ctx context.Context, path ObjectPath, iface, member string, sig Signature, args ...any) (*Message, error) {
	return m.c.Call(ctx, &Message{
		Destination: systemdName, Path: path, Interface: iface, Member: member,
		Signature: sig, Body: args,
	})
}

// isJobRemoved matches the JobRemoved signal "uoss" (id, job, unit, result).
func isJobRemoved(s *Message) bool {
	return s.Interface == managerIface && s.Member == "JobRemoved" && s.Signature == "uoss" && len(s.Body) == 4
}

// signal keeps the result of each JobRemoved for WaitJob; a job can end
// before its caller has read the reply that names it.
func (m *Manager) signal(s *Message) {
	if !isJobRemoved(s) {
		return
	}
	job, _ := s.Body[1].(ObjectPath)
	result, _ := s.Body[3].(string)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.removed[job]; !ok {
		if len(m.order) == maxRemoved {
			delete(m.removed, m.order[0])
			m.order = m.order[1:]
		}
		m.order = append(m.order, job)
	}
	m.removed[job] = result
	close(m.jobDone)
	m.jobDone = make(chan struct{})
}

// Subscribe asks the manager for its signals and, through a bus daemon,
// routes JobRemoved to this connection. On the private socket systemd
// sends signals to every peer anyway; Subscribe is harmless there. A
// connection that was already subscribed counts as subscribed.
func (m *Manager) Subscribe(ctx context.Context) error {
	if m.ep.Bus {
		rule := "type='signal',sender='" + systemdName + "',path='" + string(systemdPath) +
			"',interface='" + managerIface + "',member='JobRemoved'"
		if _, err := m.c.Call(ctx, &Message{
			Destination: "org.freedesktop.DBus", Path: "/org/freedesktop/DBus",
			Interface: "org.freedesktop.DBus", Member: "AddMatch", Signature: "s", Body: []any{rule},
		}); err != nil {
			return fmt.Errorf("sdbus: AddMatch: %w", err)
		}
	}
	_, err := m.call(ctx, systemdPath, managerIface, "Subscribe", "")
	var e *Error
	if err != nil && !(errors.As(err, &e) && e.Name == errAlreadySubscribed) {
		return fmt.Errorf("sdbus: Subscribe: %w", err)
	}
	return nil
}

// Property is one unit property for StartTransientUnit.
type Property struct {
	Name  string
	Value Variant
}

// StartTransientUnit creates and starts a transient unit; it returns the
// job's object path, whose JobRemoved signal tells the outcome.
func (m *Manager) StartTransientUnit(ctx context.Context, name, mode string, props []Property) (ObjectPath, error) {
	ps := make([]any, len(props))
	for i, p := range props {
		ps[i] = Struct{p.Name, p.Value}
	}
	r, err := m.call(ctx, systemdPath, managerIface, "StartTransientUnit", "ssa(sv)a(sa(sv))", name, mode, ps, []any{})
	if err != nil {
		return "", fmt.Errorf("sdbus: StartTransientUnit %s: %w", name, err)
	}
	return jobPath(r)
}

// AttachProcessesToUnit moves pids into the cgroup of a running unit, or
// into subcgroup below it for a unit with Delegate=yes. A user manager
// that may not move a process itself (the common ancestor's cgroup is
// root's) asks the system manager, which checks that the processes are the
// caller's. It returns once they are moved.
func (m *Manager) AttachProcessesToUnit(ctx context.Context, unit, subcgroup string, pids []uint32) error {
	if _, err := m.call(ctx, systemdPath, managerIface, "AttachProcessesToUnit", "ssau", unit, subcgroup, pids); err != nil {
		return fmt.Errorf("sdbus: AttachProcessesToUnit %s: %w", unit, err)
	}
	return nil
}

// StopUnit stops a unit; it returns the job's object path.
func (m *Manager) StopUnit(ctx context.Context, name, mode string) (ObjectPath, error) {
	r, err := m.call(ctx, systemdPath, managerIface, "StopUnit", "ss", name, mode)
	if err != nil {
		return "", fmt.Errorf("sdbus: StopUnit %s: %w", name, err)
	}
	return jobPath(r)
}

func jobPath(r *Message) (ObjectPath, error) {
	if r.Signature != "o" {
		return "", fmt.Errorf("sdbus: job reply has signature %q, want \"o\"", r.Signature)
	}
	return r.Body[0].(ObjectPath), nil
}

// WaitJob waits for the JobRemoved signal of job and returns its result
// ("done", "canceled", "timeout", "failed", "dependency", "skipped").
// Subscribe must have been called before the job was queued. Each job's
// result is returned once.
func (m *Manager) WaitJob(ctx context.Context, job ObjectPath) (string, error) {
	for {
		m.mu.Lock()
		result, ok := m.removed[job]
		if ok {
			delete(m.removed, job)
			m.order = slices.DeleteFunc(m.order, func(j ObjectPath) bool { return j == job })
		}
		next := m.jobDone
		m.mu.Unlock()
		if ok {
			return result, nil
		}
		select {
		case <-next:
		case <-m.c.Done():
			return "", fmt.Errorf("sdbus: waiting for job %s: %w", job, m.c.Err())
		case <-ctx.Done():
			return "", fmt.Errorf("sdbus: waiting for job %s: %w", job, ctx.Err())
		}
	}
}

// GetUnit returns the object path of a loaded unit; for one that is not
// loaded the error is an *Error for which IsNoSuchUnit holds.
func (m *Manager) GetUnit(ctx context.Context, name string) (ObjectPath, error) {
	r, err := m.call(ctx, systemdPath, managerIface, "GetUnit", "s", name)
	if err != nil {
		return "", fmt.Errorf("sdbus: GetUnit %s: %w", name, err)
	}
	if r.Signature != "o" {
		return "", fmt.Errorf("sdbus: GetUnit reply has signature %q, want \"o\"", r.Signature)
	}
	return r.Body[0].(ObjectPath), nil
}

// ActiveState reads the ActiveState property of the unit at path
// ("active", "activating", "deactivating", "inactive", "failed"...).
func (m *Manager) ActiveState(ctx context.Context, unit ObjectPath) (string, error) {
	s, err := m.stringProperty(ctx, unit, unitIface, "ActiveState")
	if err != nil {
		return "", fmt.Errorf("sdbus: get ActiveState: %w", err)
	}
	return s, nil
}

func (m *Manager) stringProperty(ctx context.Context, path ObjectPath, iface, name string) (string, error) {
	r, err := m.call(ctx, path, propertiesFace, "Get", "ss", iface, name)
	if err != nil {
		return "", err
	}
	if r.Signature != "v" {
		return "", fmt.Errorf("%s reply has signature %q", name, r.Signature)
	}
	v := r.Body[0].(Variant)
	s, ok := v.Value.(string)
	if !ok {
		return "", fmt.Errorf("%s is a %q, want a string", name, v.Sig)
	}
	return s, nil
}

// ControlGroup reads the manager's own cgroup (the Manager's ControlGroup
// property), e.g. /user.slice/user-1000.slice/user@1000.service.
func (m *Manager) ControlGroup(ctx context.Context) (string, error) {
	s, err := m.stringProperty(ctx, systemdPath, managerIface, "ControlGroup")
	if err != nil {
		return "", fmt.Errorf("sdbus: get ControlGroup: %w", err)
	}
	return s, nil
}

// IsNoSuchUnit reports whether err is systemd's "unit not loaded".
func IsNoSuchUnit(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Name == ErrNoSuchUnit
}
