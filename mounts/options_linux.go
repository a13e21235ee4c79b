//go:build linux

package mounts

import "strings"

// Attrs returns the MOUNT_ATTR_* bits that the OCI options ask for; the
// init applies exactly these to binds and new filesystem instances.
func Attrs(opts []string) uint64 { return attrsFor(opts) }

// Recursive reports whether a bind covers the whole subtree (rbind).
func Recursive(opts []string) bool { return hasOpt(opts, "rbind") }

// IsFilesystem reports whether the init mounts typ as a new filesystem
// instance (fsopen/fsmount) rather than a bind or a symlink.
func IsFilesystem(typ string) bool {
	switch typ {
	case "tmpfs", "proc", "devpts", "mqueue", "sysfs":
		return true
	}
	return false
}

// FSParam is one fsconfig parameter; Flag means a key without a value.
type FSParam struct {
	Key, Value string
	Flag       bool
}

// FSParams returns the filesystem parameters among a new mount's options:
// everything that is not a mount attribute or a bind/propagation word.
func FSParams(opts []string) []FSParam {
	var ps []FSParam
	for _, o := range opts {
		if attrsFor([]string{o}) != 0 || o == "rw" || o == "newinstance" || o == "bind" || o == "rbind" {
			continue // mount attributes, not filesystem parameters
		}
		k, v, hasVal := strings.Cut(o, "=")
		ps = append(ps, FSParam{Key: k, Value: v, Flag: !hasVal})
	}
	return ps
}
