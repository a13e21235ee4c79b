package darwin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Resolver returns the canonical spelling of an absolute host path: the one
// Seatbelt matches against, which is the path after symlinks (/tmp is
// /private/tmp, $TMPDIR lives under /private/var/folders). A path that does
// not exist yet resolves through its longest existing prefix.
type Resolver func(p string) (string, error)

// staticAliases are the top-level symlinks every macOS install has.
var staticAliases = [...][2]string{
	{"/tmp", "/private/tmp"},
	{"/var", "/private/var"},
	{"/etc", "/private/etc"},
}

// StaticResolver applies only the fixed macOS aliases and never touches the
// disk. Tests use it (alone or under a stub) in place of HostResolver.
func StaticResolver(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("darwin: resolve %q: not absolute", p)
	}
	c := path.Clean(p)
	for _, a := range staticAliases {
		if rest, ok := cutDir(c, a[0]); ok {
			return a[1] + rest, nil
		}
	}
	return c, nil
}

// HostResolver resolves symlinks on the real filesystem. Missing trailing
// components are kept as they are, so a secret that does not exist yet is
// still denied at the place it would appear.
func HostResolver(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("darwin: resolve %q: not absolute", p)
	}
	existing, rest := filepath.Clean(p), ""
	for {
		_, err := os.Lstat(existing)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || existing == "/" {
			return "", fmt.Errorf("darwin: resolve %s: %w", p, err)
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", fmt.Errorf("darwin: resolve %s: %w", p, err)
	}
	return filepath.Join(real, rest), nil
}

// cutDir reports whether p is dir or lies below it, and returns the part of
// p after dir ("" or "/...").
func cutDir(p, dir string) (string, bool) {
	if p == dir {
		return "", true
	}
	if dir == "/" {
		return p, strings.HasPrefix(p, "/")
	}
	if strings.HasPrefix(p, dir+"/") {
		return p[len(dir):], true
	}
	return "", false
}

// within reports whether p is dir or lies below it.
func within(p, dir string) bool {
	_, ok := cutDir(p, dir)
	return ok
}

// ancestors lists the directories above p, nearest first, "/" last.
func ancestors(p string) []string {
	var out []string
	for d := path.Dir(p); ; d = path.Dir(d) {
		out = append(out, d)
		if d == "/" {
			return out
		}
	}
}

// depth is the number of components in a clean absolute path.
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
