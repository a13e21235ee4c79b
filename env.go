package agentrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultPath is PATH inside the sandbox when the caller has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passEnv are the caller variables that reach the command; everything else
// (tokens, SSH_AUTH_SOCK, cloud credentials) is dropped.
var passEnv = [...]string{"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "COLORTERM", "NO_COLOR", "TZ"}

// Environ returns the command's environment: the allowlisted caller
// variables from callerEnv, HOME=/tmp, then the policy's Env entries, which
// win. Malformed policy entries are an error.
func (p *Policy) Environ(callerEnv []string) ([]string, error) {
	vals := map[string]string{"HOME": "/tmp", "PATH": DefaultPath}
	order := []string{"PATH", "HOME"}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, kv := range callerEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		for _, allowed := range passEnv {
			if k == allowed {
				set(k, v)
			}
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

// ResolveWorkspace returns the absolute, symlink-free workspace directory.
// An empty Workspace means the current directory (its physical path). An
// explicit path whose last component is a symlink is refused with the
// target named, so the caller states what it means to expose.
func (p *Policy) ResolveWorkspace() (string, error) {
	if p.Workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("%w: current directory: %v", ErrWorkspace, err)
		}
		real, err := filepath.EvalSymlinks(wd)
		if err != nil {
			return "", fmt.Errorf("%w: current directory %s: %v", ErrWorkspace, wd, err)
		}
		return real, nil
	}
	abs, err := filepath.Abs(p.Workspace)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrWorkspace, p.Workspace, err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return "", fmt.Errorf("%w: %s does not exist", ErrWorkspace, abs)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, terr := filepath.EvalSymlinks(abs)
		if terr != nil {
			return "", fmt.Errorf("%w: %s is a dangling symlink", ErrWorkspace, abs)
		}
		return "", fmt.Errorf("%w: %s is a symlink to %s; pass the real directory if that is what you mean", ErrWorkspace, abs, target)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrWorkspace, abs)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrWorkspace, abs, err)
	}
	return real, nil
}
