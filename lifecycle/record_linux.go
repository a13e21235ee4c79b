//go:build linux

package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/internal/procid"
	"github.com/agentrun/agentrun/internal/statedir"
	"golang.org/x/sys/unix"
)

// State is where a sandbox is in its life.
type State string

// The states of a sandbox, as its record and Sandbox.State report them.
const (
	// Creating: Create is building it; no init may exist yet.
	Creating State = "creating"
	// Created: the init has built the root and waits for Start.
	Created State = "created"
	// Running: the command was started.
	Running State = "running"
	// Stopped: the init has exited, or its owner died with it.
	Stopped State = "stopped"
)

// recordVersion is the layout of Record; a record of a version above it
// is refused rather than guessed at. Version 2 added Serve and Socket.
const recordVersion = 2

// Record is what a named sandbox keeps in its state directory: enough for
// another process to find it, tell whether it still runs and signal it,
// and for a sweep to clean up after an owner that died.
type Record struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	State   State  `json:"state"`
	// Owner is the process that made the sandbox and holds it: the init
	// dies with it (its parent death signal), and the sweep removes the
	// record once it is gone.
	Owner procid.ID `json:"owner"`
	// Init is the sandbox's PID 1, once it exists.
	Init    *procid.ID `json:"init,omitempty"`
	Created time.Time  `json:"created"`
	// Cgroup lists the sandbox's cgroup directories, if it has any.
	Cgroup []string `json:"cgroup,omitempty"`
	// Serve says the sandbox is a session (Options.Serve).
	Serve bool `json:"serve,omitempty"`
	// Socket is where the session's owner serves it (Options.Socket); the
	// sweep removes it with the record.
	Socket string `json:"socket,omitempty"`
	// Holder says the owner exists only to hold the sandbox
	// (Options.Holder), so KillOwner may end it.
	Holder bool `json:"holder,omitempty"`
}

// ErrNotFound is returned by Load for an ID without a record.
var ErrNotFound = errors.New("lifecycle: no sandbox with that id")

// ErrExists is returned by Create for an ID that has a record already.
var ErrExists = errors.New("lifecycle: a sandbox with that id exists")

// idOK says whether id may name a sandbox: a file name in the state
// directory, so no slash, no leading dot, nothing a shell or a log line
// would trip on: 1-128 of [A-Za-z0-9_.-], starting with a letter or digit.
// (A regular expression of it costs every agentrun start most of a
// millisecond to compile.)
func idOK(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// ValidID checks that id can name a sandbox.
func ValidID(id string) error {
	if !idOK(id) || strings.Contains(id, "..") {
		return fmt.Errorf("lifecycle: invalid sandbox id %q: want 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit, without \"..\"", id)
	}
	return nil
}

// StateDir is where the records of euid's sandboxes live.
func StateDir(euid int) string {
	return filepath.Join(statedir.Root(euid), "sandboxes")
}

func recordPath(dir, id string) string { return filepath.Join(dir, id+".json") }

// lockDir takes the state directory's lock, exclusively: creating a
// record, sweeping and removing one hold it, so that a sweep never removes
// a record that a creator made in its place after it read the old one.
// Rewrites by a live owner need none: a sweep leaves its records alone.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lifecycle: lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// privateDir checks that dir, which holds records other code acts on
// (signals, kills), is the caller's alone; a missing one holds nothing.
func privateDir(dir string) (exists bool, err error) {
	err = statedir.Private(dir, os.Geteuid())
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lifecycle: state directory: %w", err)
	}
	return true, nil
}

// createRecord stores a new record, sweeping the records of dead owners
// first (their IDs may be reused); the exclusive create refuses an ID in
// use, so two creators of one ID cannot both go on.
func createRecord(dir string, r *Record) (string, error) {
	if err := statedir.Ensure(dir, os.Geteuid()); err != nil {
		return "", fmt.Errorf("lifecycle: state directory: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	_, _ = sweepLocked(dir)
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("lifecycle: record: %w", err)
	}
	path := recordPath(dir, r.ID)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("%w: %q (%s)", ErrExists, r.ID, path)
	}
	if err != nil {
		return "", fmt.Errorf("lifecycle: record: %w", err)
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("lifecycle: record: %w", err)
	}
	return path, nil
}

// rewriteRecord replaces the record at path atomically: a reader sees the
// old one or the new one, never a torn one. The new content goes to a
// fresh file of its own (never through a name someone else made).
func rewriteRecord(path string, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("lifecycle: record: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-") // not *.json: List and Sweep skip it
	if err != nil {
		return fmt.Errorf("lifecycle: record: %w", err)
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("lifecycle: record: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("lifecycle: record: %w", err)
	}
	return nil
}

// removeRecord removes the record at path under the directory's lock.
func removeRecord(path string) error {
	unlock, err := lockDir(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lifecycle: remove record: %w", err)
	}
	return nil
}

// Load reads the record of sandbox id in dir. Its State is what the
// record says, corrected to Stopped when the init or the owner is gone.
func Load(dir, id string) (*Record, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	if ok, err := privateDir(dir); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		return nil, err
	}
	r, err := readRecord(recordPath(dir, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	r.State = r.observed()
	return r, nil
}

// readRecord reads and checks one record file: a regular file of this
// user's, named after the ID it holds, of a known version.
func readRecord(path string) (*Record, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() || fi.Size() > 64<<10 {
		return nil, fmt.Errorf("lifecycle: %s is not a record of this user's", path)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && fi.Size() > 0 {
		return nil, fmt.Errorf("lifecycle: read %s: %w", path, err)
	}
	var r Record
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("lifecycle: malformed record %s: %w", path, err)
	}
	if r.Version < 1 || r.Version > recordVersion || ValidID(r.ID) != nil || filepath.Base(path) != r.ID+".json" {
		return nil, fmt.Errorf("lifecycle: malformed record %s", path)
	}
	return &r, nil
}

// observed is the record's state as the processes it names tell it: a
// sandbox whose init or owner is gone is stopped, whatever was written.
func (r *Record) observed() State {
	switch {
	case r.State == Stopped:
		return Stopped
	case !r.Owner.Alive():
		return Stopped
	case r.Init != nil && !r.Init.Alive():
		return Stopped
	}
	return r.State
}

// List reads every record in dir, sorted by ID. Files that are not valid
// records are left out and reported in err, which does not stop the list.
func List(dir string) ([]Record, error) {
	if ok, err := privateDir(dir); err != nil || !ok {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: list: %w", err)
	}
	var out []Record
	var errs []error
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		r, err := readRecord(filepath.Join(dir, e.Name()))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // removed meanwhile
				errs = append(errs, err)
			}
			continue
		}
		r.State = r.observed()
		out = append(out, *r)
	}
	return out, errors.Join(errs...)
}

// Signal sends sig to the sandbox's init, which passes it on to the
// command, through a pidfd checked to be that init: a pid that was reused
// since the record was written is not signalled.
func (r *Record) Signal(sig syscall.Signal) error {
	if r.Init == nil {
		return fmt.Errorf("lifecycle: sandbox %q has no init yet", r.ID)
	}
	fd, err := r.Init.Pidfd()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// KillOwner kills the sandbox's owner (a holder that does not answer;
// never a program's own, which it refuses),
// through a pidfd checked to be that process, and waits up to five
// seconds for it to be gone; a sweep then ends the rest. An owner already
// gone is not an error.
func (r *Record) KillOwner() error {
	if !r.Holder {
		return fmt.Errorf("lifecycle: %q is held by process %d, a program's own sandbox: it ends when that program deletes it", r.ID, r.Owner.PID)
	}
	fd, err := r.Owner.Pidfd()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("lifecycle: kill the owner of %q: %w", r.ID, err)
	}
	// The pidfd turns readable once the process has exited.
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds())+1)
		if n > 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("lifecycle: wait for the owner of %q: %w", r.ID, err)
		}
	}
	return fmt.Errorf("lifecycle: the owner of %q did not end after SIGKILL", r.ID)
}

// Sweep removes the records in dir whose owner died (killed with SIGKILL,
// say) and kills an init of theirs that is still alive; the kernel has
// normally done that already (the init's parent death signal), and the
// cgroups' own sweep removes their cgroups. Records of owners in another
// PID namespace are left alone. removed counts the records removed.
func Sweep(dir string) (removed int, err error) {
	if ok, err := privateDir(dir); err != nil || !ok {
		return 0, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	return sweepLocked(dir)
}

// sweepLocked is Sweep with the directory's lock held.
func sweepLocked(dir string) (removed int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("lifecycle: sweep: %w", err)
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(dir, name)
		if base, _, ok := strings.Cut(name, ".json.tmp-"); ok && strings.HasPrefix(base, ".") {
			// A rewrite that its writer did not finish: stale once the
			// record it belongs to is gone.
			if _, err := os.Lstat(filepath.Join(dir, base[1:]+".json")); errors.Is(err, fs.ErrNotExist) {
				os.Remove(path)
			}
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		r, err := readRecord(path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		if !r.Owner.Judgeable() || r.Owner.Alive() {
			continue
		}
		if r.Init != nil {
			if err := r.Signal(unix.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
				errs = append(errs, fmt.Errorf("lifecycle: sweep %s: kill init: %w", r.ID, err))
				continue
			}
		}
		removeSocket(dir, r.Socket)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("lifecycle: sweep: %w", err))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// removeSocket removes a record's socket: only a socket, and only below
// the state directory, whatever the record says.
func removeSocket(dir, sock string) {
	if sock == "" || !statedir.Within(sock, dir) {
		return
	}
	if fi, err := os.Lstat(sock); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		os.Remove(sock)
	}
}
