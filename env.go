package agentrun

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentrun/agentrun/internal/passenv"
)

// DefaultPath is PATH inside the sandbox when the caller has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Environ returns the command's environment: PATH and HOME=/tmp, the
// allowlisted caller variables from callerEnv in the allowlist's order,
// then the policy's Env entries, which win. Malformed policy entries are an
// error.
func (p *Policy) Environ(callerEnv []string) ([]string, error) {
	vals := map[string]string{"HOME": "/tmp", "PATH": DefaultPath}
	order := []string{"PATH", "HOME"}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	// The allowlist's order, not the caller's: the same variables give
	// the same environment (and the same plan, which prestart compares)
	// however a shell on the way ordered them. The last of duplicates wins.
	caller := map[string]string{}
	for _, kv := range callerEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			caller[k] = v
		}
	}
	for _, k := range passenv.Names {
		if v, ok := caller[k]; ok {
			set(k, v)
		}
	}
	for _, kv := range p.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("policy: env entry %q is not KEY=VALUE", kv)
		}
		set(k, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

// ErrWorkspace marks workspace errors (missing, not a directory, symlink).
var ErrWorkspace = errors.New("workspace")

// ResolveWorkspace returns the absolute workspace directory with every
// symlink resolved except that the last component is never followed: it must
// be a real directory. The path is checked once here and then opened with
// symlink resolution forbidden (RESOLVE_NO_SYMLINKS), so a symlink swapped
// in afterwards makes the spawn fail rather than expose its target. An
// empty Workspace means the current directory (its physical path).
func (p *Policy) ResolveWorkspace() (string, error) {
	return p.resolveWorkspace(filepath.EvalSymlinks, os.Lstat)
}

// resolveWorkspace is ResolveWorkspace with the host reads passed in, so
// that a spawn can record them (express_linux.go).
func (p *Policy) resolveWorkspace(evalSymlinks func(string) (string, error), lstat func(string) (fs.FileInfo, error)) (string, error) {
	raw := p.Workspace
	if raw == "" {
		wd, err := physicalWd()
		if err != nil {
			return "", fmt.Errorf("%w: current directory: %v", ErrWorkspace, err)
		}
		raw = wd
	}
	abs, err := filepath.Abs(raw)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrWorkspace, raw, err)
	}
	if abs == "/" {
		return "", fmt.Errorf("%w: refusing / as the workspace", ErrWorkspace)
	}
	parent, err := evalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", fmt.Errorf("%w: %s does not exist", ErrWorkspace, abs)
	}
	real := filepath.Join(parent, filepath.Base(abs))
	fi, err := lstat(real)
	if err != nil {
		return "", fmt.Errorf("%w: %s does not exist", ErrWorkspace, abs)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, terr := evalSymlinks(real)
		if terr != nil {
			return "", fmt.Errorf("%w: %s is a dangling symlink", ErrWorkspace, abs)
		}
		return "", fmt.Errorf("%w: %s is a symlink to %s; pass the real directory if that is what you mean", ErrWorkspace, abs, target)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrWorkspace, abs)
	}
	return real, nil
}
