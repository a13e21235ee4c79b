//go:build !linux

package probe

import (
	"os"
	"runtime"
)

// Probe inspects this host for this process. Off Linux there is nothing
// of the Linux sandbox to probe: every check reports unavailable.
func Probe() Report { return Run(HostEnv()) }

// HostEnv is the Env of this process: only the kernel release is known.
func HostEnv() Env {
	return Env{Euid: os.Geteuid(), Uname: func() (string, error) { return runtime.GOOS, nil }}
}
