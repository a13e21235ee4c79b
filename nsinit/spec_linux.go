//go:build linux

package nsinit

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// HasNamespace reports whether s asks for a new namespace of type t
// (one to create, not one to join).
func HasNamespace(s *specs.Spec, t specs.LinuxNamespaceType) bool {
	if s.Linux == nil {
		return false
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == t && ns.Path == "" {
			return true
		}
	}
	return false
}

// rlimitResource maps an OCI rlimit name to its resource number.
func rlimitResource(name string) (int, bool) {
	switch name {
	case "RLIMIT_NOFILE":
		return unix.RLIMIT_NOFILE, true
	case "RLIMIT_FSIZE":
		return unix.RLIMIT_FSIZE, true
	case "RLIMIT_CPU":
		return unix.RLIMIT_CPU, true
	case "RLIMIT_NPROC":
		return unix.RLIMIT_NPROC, true
	case "RLIMIT_AS":
		return unix.RLIMIT_AS, true
	case "RLIMIT_CORE":
		return unix.RLIMIT_CORE, true
	case "RLIMIT_DATA":
		return unix.RLIMIT_DATA, true
	case "RLIMIT_STACK":
		return unix.RLIMIT_STACK, true
	case "RLIMIT_MEMLOCK":
		return unix.RLIMIT_MEMLOCK, true
	case "RLIMIT_MSGQUEUE":
		return unix.RLIMIT_MSGQUEUE, true
	case "RLIMIT_NICE":
		return unix.RLIMIT_NICE, true
	case "RLIMIT_RTPRIO":
		return unix.RLIMIT_RTPRIO, true
	case "RLIMIT_RTTIME":
		return unix.RLIMIT_RTTIME, true
	case "RLIMIT_SIGPENDING":
		return unix.RLIMIT_SIGPENDING, true
	case "RLIMIT_LOCKS":
		return unix.RLIMIT_LOCKS, true
	}
	return 0, false
}
