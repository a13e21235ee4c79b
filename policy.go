// Package agentrun runs commands in sandboxes that it builds itself.
//
// The package owns the agent-level Policy (what a caller asks for: a workspace,
// extra mounts, network mode, limits, environment, timeout) and its
// compilation into an OCI runtime-spec (specs.Spec), which is the one
// representation everything below consumes. Run executes a Policy; on Linux it
// goes through nsinit, on macOS through the Seatbelt launcher in darwin/.
// On Linux, Run also gives the sandbox a cgroup of its own when it can
// (cgroups), picks a shared root template for its root when the spawn may
// use one (mounts), and for the CLI records what the express path needs to
// start the next spawn with the same command line without the Go runtime
// (Options.Express).
package agentrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// NetworkMode selects how the sandbox reaches the network.
type NetworkMode string

const (
	// NetworkNone gives the sandbox a fresh network namespace with only
	// loopback up: no route anywhere, no DNS, no host loopback services.
	NetworkNone NetworkMode = "none"
	// NetworkHost shares the caller's network namespace. It is weaker:
	// host loopback services and abstract unix sockets are reachable.
	NetworkHost NetworkMode = "host"
)

// MountMode is the kind of an extra mount.
type MountMode string

const (
	MountRO    MountMode = "ro"
	MountRW    MountMode = "rw"
	MountTmpfs MountMode = "tmpfs"
)

// Mount is an extra mount requested by the policy.
type Mount struct {
	// Source is a host path; empty for tmpfs.
	Source string `json:"source,omitempty"`
	// Dest is the absolute path inside the sandbox.
	Dest string    `json:"dest"`
	Mode MountMode `json:"mode"`
	// Size caps a tmpfs; zero means the default cap.
	Size ByteSize `json:"size,omitempty"`
}

// Limits are resource limits. Zero means "not set".
type Limits struct {
	Memory ByteSize `json:"memory,omitempty"`
	Pids   int64    `json:"pids,omitempty"`
	CPUs   float64  `json:"cpus,omitempty"`
	// Rlimits applied to the command (soft = hard = value).
	NoFile  uint64   `json:"nofile,omitempty"`
	FSize   ByteSize `json:"fsize,omitempty"`
	CPUTime Duration `json:"cpu_time,omitempty"`
	NProc   uint64   `json:"nproc,omitempty"`
}

// Policy is what a caller asks of a sandbox.
type Policy struct {
	// Workspace is the host directory bound read-write at /workspace.
	// Empty means the current directory.
	Workspace string      `json:"workspace,omitempty"`
	Mounts    []Mount     `json:"mounts,omitempty"`
	Network   NetworkMode `json:"network,omitempty"`
	Limits    Limits      `json:"limits,omitempty"`
	// Env holds KEY=VALUE entries added to the small default allowlist.
	Env     []string `json:"env,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
	// CapAdd grants the command these capabilities (e.g. "CAP_NET_RAW"),
	// held in the sandbox's user namespace only. Default: none at all.
	CapAdd []string `json:"cap_add,omitempty"`
	// Seccomp selects the system-call filter: "" for the default agent
	// profile, "unconfined" for none (reported in the result), or the path
	// of a profile in OCI or Docker JSON format.
	Seccomp string `json:"seccomp,omitempty"`
	// Command is argv; it may be empty in a policy file and given on the
	// command line instead.
	Command []string `json:"command,omitempty"`
}

// ReadPolicy decodes a JSON policy. Unknown fields and trailing data are
// errors, so a typo never silently weakens a sandbox.
func ReadPolicy(r io.Reader) (*Policy, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if dec.More() {
		return nil, errors.New("policy: trailing data after the JSON object")
	}
	return &p, nil
}

// LoadPolicyFile reads a JSON policy from path.
func LoadPolicyFile(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := ReadPolicy(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ByteSize is a size in bytes. In JSON and on the command line it is a number
// or a string with a K, M, G or T suffix (powers of 1024).
type ByteSize int64

// ParseByteSize parses "64M", "1G", "4096".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (want e.g. 512M, 2G)", s)
	}
	return ByteSize(v * mult), nil
}

func (b *ByteSize) UnmarshalJSON(data []byte) error {
	var n int64
	if err := json.Unmarshal(data, &n); err == nil {
		if n < 0 {
			return fmt.Errorf("negative size %d", n)
		}
		*b = ByteSize(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("size must be a number or a string like \"64M\"")
	}
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Duration is a time.Duration written as "30s" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", s)
	}
	*d = Duration(v)
	return nil
}
