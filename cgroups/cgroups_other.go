//go:build !linux

package cgroups

import (
	"log/slog"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DefaultParent is the name of agentrun's parent cgroup.
const DefaultParent = "agentrun"

// Options configure a Manager (see the Linux documentation).
type Options struct {
	StateDir string
	Parent   string
	Logger   *slog.Logger
}

// Manager is unavailable off Linux; every method reports ErrUnsupported.
type Manager struct{}

// Cgroup is unavailable off Linux.
type Cgroup struct{}

func NewManager(Options) (*Manager, error) { return nil, ErrUnsupported }

func (m *Manager) Mode() Mode                        { return Unavailable }
func (m *Manager) Check(*specs.LinuxResources) error { return ErrUnsupported }
func (m *Manager) Info() Info {
	return Info{Mode: Unavailable, Available: []string{}, Usable: []string{}}
}
func (m *Manager) Create(string, *specs.LinuxResources) (*Cgroup, error) { return nil, ErrUnsupported }
func (m *Manager) Sweep() (int, error)                                   { return 0, nil }

func (c *Cgroup) ID() string               { return "" }
func (c *Cgroup) V2() bool                 { return false }
func (c *Cgroup) CallerHash() string       { return "" }
func (c *Cgroup) Paths() []string          { return nil }
func (c *Cgroup) FD() int                  { return -1 }
func (c *Cgroup) Add(int) error            { return ErrUnsupported }
func (c *Cgroup) Populated() (bool, error) { return false, ErrUnsupported }
func (c *Cgroup) Kill() error              { return ErrUnsupported }
func (c *Cgroup) Stats() (Stats, error)    { return Stats{}, ErrUnsupported }
func (c *Cgroup) Delete() error            { return nil }
