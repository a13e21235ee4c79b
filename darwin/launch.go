package darwin

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SandboxExecPath is called by absolute path so PATH can never substitute
// another program for the sandbox.
const SandboxExecPath = "/usr/bin/sandbox-exec"

// MaxExecBytes bounds sandbox-exec's argv plus environment. kern.argmax is
// 1 MiB on current macOS and 256 KiB on old releases; staying under the
// smaller keeps a failure here instead of an opaque E2BIG at exec.
const MaxExecBytes = 256 << 10

// NewTag returns a fresh per-run message tag.
func NewTag() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("darwin: message tag: %w", err)
	}
	return "agentrun_" + hex.EncodeToString(b[:]), nil
}

// Args is sandbox-exec's argv for running argv under p: the profile text,
// one -D per parameter, then the command after "--" so a command name that
// starts with a dash is never read as an option.
func Args(p *Profile, argv []string) ([]string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("darwin: no command to run")
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return nil, fmt.Errorf("darwin: command argument %q contains NUL", a)
		}
	}
	args := make([]string, 0, 4+2*len(p.Params)+len(argv))
	args = append(args, SandboxExecPath, "-p", p.Text)
	for _, prm := range p.Params {
		if err := checkParamValue(prm); err != nil {
			return nil, fmt.Errorf("darwin: %w", err)
		}
		args = append(args, "-D", prm.Key+"="+prm.Value)
	}
	args = append(args, "--")
	return append(args, argv...), nil
}

// Environ is the command's environment on macOS. base is the policy's
// scrubbed environment (agentrun.Policy.Environ); the Linux sandbox gives
// HOME=/tmp a private tmpfs, which here is the per-run directory, so HOME
// and TMPDIR point there unless the policy chose otherwise.
func Environ(base []string, tmpDir string) []string {
	out := make([]string, 0, len(base)+1)
	hasTmp := false
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME" && v == "/tmp":
			kv = "HOME=" + tmpDir
		case k == "TMPDIR":
			hasTmp = true
		}
		out = append(out, kv)
	}
	if !hasTmp {
		out = append(out, "TMPDIR="+tmpDir)
	}
	return out
}

// CheckExecSize fails when argv and environment would not fit exec.
func CheckExecSize(args, env []string) error {
	n := 0
	for _, s := range append(append([]string{}, args...), env...) {
		n += len(s) + 1 + 8 // the string, its NUL and its pointer
	}
	if n > MaxExecBytes {
		return fmt.Errorf("darwin: sandbox-exec arguments and environment are %d bytes, over %d", n, MaxExecBytes)
	}
	return nil
}

// DefaultCollectDrain is how long the collector keeps listening after the
// command has ended; denial reports reach the log a little after the
// operation they refuse.
const DefaultCollectDrain = 100 * time.Millisecond

// DefaultOutputDrain bounds copying of output still in flight once the
// command's process group is gone.
const DefaultOutputDrain = 250 * time.Millisecond

// Launch is one sandboxed run for Exec.
type Launch struct {
	Profile *Profile
	Argv    []string
	// Env is the complete environment (see Environ); nothing is inherited.
	Env []string
	// Dir is the working directory, the workspace.
	Dir         string
	Stdio       Stdio
	Supervision Supervision
	// Collect streams this run's denials from the unified log.
	Collect      bool
	CollectDrain time.Duration
}

// Finished is a run that reached the command (whatever its status).
type Finished struct {
	Outcome    Outcome
	Violations Collection
	// Ended is when the command's process exited, before the violation
	// drain, so a caller's duration measures the command.
	Ended time.Time
}
