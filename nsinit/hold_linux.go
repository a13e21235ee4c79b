package nsinit

import (
	"os"
	"os/exec"
)

// holdArg0 is argv[0] of a process that only holds something open until
// its stdin reaches EOF.
const holdArg0 = "agentrun-hold"

// Dispatch runs the re-exec'd role of the binary (the holder of
// HoldCommand) and does not return for it. Call it first thing in main.
func Dispatch() {
	if len(os.Args) > 0 && os.Args[0] == holdArg0 {
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		os.Exit(0)
	}
}

// HoldCommand returns a command that re-executes this binary as a process
// that does nothing until its stdin reaches EOF (or it is killed): the
// holder role of Dispatch. cgroups uses it to keep a transient systemd
// scope populated for exactly as long as the sandbox's cgroup is in use.
func HoldCommand() *exec.Cmd {
	return &exec.Cmd{Path: "/proc/self/exe", Args: []string{holdArg0}}
}
