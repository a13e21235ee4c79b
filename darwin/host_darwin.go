//go:build darwin

package darwin

import (
	"os"
	"path/filepath"
	"syscall"
)

// Terminals returns the device paths of the pty terminals among the
// caller's stdio, so the profile can open exactly those ttys and no other.
// xcodeSelectLink points at the developer directory xcode-select chose.
const xcodeSelectLink = "/private/var/db/xcode_select_link"

func Terminals(streams ...any) []string {
	var out []string
	for _, s := range streams {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			continue
		}
		if name, ok := terminalName(f); ok {
			out = append(out, name)
		}
	}
	return out
}

func terminalName(f *os.File) (string, bool) {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return "", false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	name := ptyName(uint64(uint32(st.Rdev)))
	dev, err := os.Stat(name)
	if err != nil {
		return "", false
	}
	dst, ok := dev.Sys().(*syscall.Stat_t)
	if !ok || dst.Rdev != st.Rdev {
		return "", false
	}
	return name, true
}

// DeveloperDir is the Xcode or Command Line Tools directory selected with
// xcode-select, or "" when none is selected.
func DeveloperDir() string {
	target, err := os.Readlink(xcodeSelectLink)
	if err != nil {
		return ""
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(xcodeSelectLink), target)
	}
	return filepath.Clean(target)
}
