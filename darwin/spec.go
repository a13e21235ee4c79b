package darwin

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
)

// Network is how the sandbox may reach the network.
type Network string

const (
	// NetworkNone denies every IP connection, loopback included: Seatbelt
	// cannot give the sandbox a private loopback, and the host's loopback
	// services are exactly what "none" must keep out of reach.
	NetworkNone Network = "none"
	// NetworkHost allows outbound and inbound IP, DNS and certificate trust.
	NetworkHost Network = "host"
	// NetworkProxy allows only TCP to the filtering proxy on localhost:ProxyPort.
	NetworkProxy Network = "proxy"
)

// Mount is a host path the sandbox may use at its own (host) path.
type Mount struct {
	Path     string
	Writable bool
}

// Spec is everything Compile needs. Paths are absolute host paths; Compile
// canonicalizes them through the Resolver it is given.
type Spec struct {
	// Tag marks every denial of this run in the system log.
	Tag string
	// Workspace is granted read-write and is the working directory.
	Workspace string
	// Home is the caller's home directory, used to place the secret denies.
	// Empty skips the home-relative secrets.
	Home string
	// TempDirs are per-run read-write directories (TMPDIR and HOME).
	TempDirs []string
	Mounts   []Mount
	Network  Network
	// ProxyPort is the filtering proxy's port for NetworkProxy.
	ProxyPort int
	// Terminals are the device paths of the caller's terminals that the
	// command inherits on stdin or stdout; only those ttys are usable.
	Terminals []string
	// TerminalIoctl also allows ioctls (termios, window size) on them.
	// The command runs in a new session without a controlling terminal,
	// so TIOCSTI is refused for an ordinary user; root bypasses that check
	// and should run without terminal ioctls.
	TerminalIoctl bool
	// ExtraSystemRead are further read-only locations found on the host,
	// such as the selected Xcode developer directory.
	ExtraSystemRead []string
}

var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{8,64}$`)

// validate checks what Compile cannot repair. It runs before resolution, so
// it only looks at the shape of the input.
func (s *Spec) validate() error {
	if !tagPattern.MatchString(s.Tag) {
		return fmt.Errorf("darwin: message tag %q must be 8-64 characters of [A-Za-z0-9_-]", s.Tag)
	}
	if err := checkHostPath("workspace", s.Workspace); err != nil {
		return err
	}
	if path.Clean(s.Workspace) == "/" {
		return errors.New("darwin: workspace / would make the whole disk writable")
	}
	if s.Home != "" {
		if err := checkHostPath("home", s.Home); err != nil {
			return err
		}
	}
	for _, group := range []struct {
		what  string
		paths []string
	}{{"temporary directory", s.TempDirs}, {"terminal", s.Terminals}, {"system path", s.ExtraSystemRead}} {
		for _, p := range group.paths {
			if err := checkHostPath(group.what, p); err != nil {
				return err
			}
		}
	}
	for _, m := range s.Mounts {
		if err := checkHostPath("mount", m.Path); err != nil {
			return err
		}
	}
	return s.validateNetwork()
}

func (s *Spec) validateNetwork() error {
	switch s.Network {
	case NetworkNone, NetworkHost:
		return nil
	case NetworkProxy:
		if s.ProxyPort < 1 || s.ProxyPort > 65535 {
			return fmt.Errorf("darwin: proxy port %d is not a TCP port", s.ProxyPort)
		}
		return nil
	}
	return fmt.Errorf("darwin: unknown network mode %q (want none, host or proxy)", s.Network)
}

// checkHostPath rejects what can never be a usable parameter: relative
// paths, and bytes that would end or split a -D argument or a log line.
func checkHostPath(what, p string) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("darwin: %s path %q is not absolute", what, p)
	}
	if strings.ContainsAny(p, "\x00\n\r") {
		return fmt.Errorf("darwin: %s path %q contains NUL or a line break", what, p)
	}
	return nil
}

// MountRequest is a mount as the agent-level policy states it; Kind is
// "ro", "rw" or "tmpfs".
type MountRequest struct {
	Source string
	Dest   string
	Kind   string
}

// TranslateMounts maps policy mounts onto what Seatbelt can express. It has
// no mount namespace, so a bind is visible at its source path (a different
// destination is reported), and a tmpfs cannot be created at all: writes
// there stay denied and the warning points at $TMPDIR instead.
func TranslateMounts(reqs []MountRequest) ([]Mount, []string, error) {
	var (
		out   []Mount
		warns []string
	)
	for _, r := range reqs {
		switch r.Kind {
		case "ro", "rw":
			if err := checkHostPath("mount source", r.Source); err != nil {
				return nil, nil, err
			}
			src := path.Clean(r.Source)
			if r.Dest != "" && path.Clean(r.Dest) != src {
				warns = append(warns, fmt.Sprintf("mount %s:%s: macOS cannot remap paths; the command sees it at %s", r.Source, r.Dest, src))
			}
			out = append(out, Mount{Path: src, Writable: r.Kind == "rw"})
		case "tmpfs":
			warns = append(warns, fmt.Sprintf("tmpfs %s is not available on macOS (Seatbelt cannot mount); writes there are denied, use $TMPDIR", r.Dest))
		default:
			return nil, nil, fmt.Errorf("darwin: mount %s: unknown mode %q", r.Dest, r.Kind)
		}
	}
	return out, warns, nil
}

// Limits mirrors the policy's resource limits.
type Limits struct {
	Memory  int64
	Pids    int64
	CPUs    float64
	NoFile  uint64
	FSize   int64
	CPUTime time.Duration
	NProc   uint64
}

// Unenforceable names the limits that are set. Seatbelt has no resource
// controls and sandbox-exec no rlimit hook, so every set limit is one this
// backend cannot honour; the caller fails closed rather than run unbounded.
func (l Limits) Unenforceable() []string {
	var names []string
	add := func(set bool, name string) {
		if set {
			names = append(names, name)
		}
	}
	add(l.Memory != 0, "memory")
	add(l.Pids != 0, "pids")
	add(l.CPUs != 0, "cpus")
	add(l.NoFile != 0, "nofile")
	add(l.FSize != 0, "fsize")
	add(l.CPUTime != 0, "cpu_time")
	add(l.NProc != 0, "nproc")
	return names
}
