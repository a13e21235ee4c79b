package nsinit

import "os/exec"

// HoldCommand returns a command that re-executes this binary as a process
// that does nothing until its stdin reaches EOF (or it is killed): the
// holder role of Dispatch. cgroups uses it to keep a transient systemd
// scope populated for exactly as long as the sandbox's cgroup is in use.
func HoldCommand() *exec.Cmd {
	return &exec.Cmd{Path: "/proc/self/exe", Args: []string{holdArg0}}
}
