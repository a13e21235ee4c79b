//go:build linux && cgo

package nsinit

import (
	"errors"
	"syscall"

	"github.com/agentrun/agentrun/nsinit/internal/cinit"
)

// forwardSignals installs C handlers that send sigs on through pidfd (the
// pid when it is -1): no thread, and no round trip to one, as os/signal
// would need.
func forwardSignals(p *Process, pidfd int, sigs []syscall.Signal) (func(), error) {
	if err := cinit.ForwardSignals(pidfd, p.pid, sigs); err != nil {
		if errors.Is(err, cinit.ErrForwarding) {
			return nil, ErrForwarding
		}
		return nil, err
	}
	return cinit.StopForwarding, nil
}
