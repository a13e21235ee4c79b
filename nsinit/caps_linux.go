//go:build linux

package nsinit

import (
	"github.com/agentrun/agentrun/internal/capnames"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// keptCaps are the capability numbers the Spec grants the command.
func keptCaps(proc *specs.Process) map[int]bool {
	keep := map[int]bool{}
	if proc.Capabilities == nil {
		return keep
	}
	for _, n := range proc.Capabilities.Ambient {
		if c := capnames.Number(n); c >= 0 {
			keep[c] = true
		}
	}
	return keep
}
