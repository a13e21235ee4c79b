//go:build linux && cgo

package nsinit

import (
	"errors"
	"syscall"

	"github.com/agentrun/agentrun/nsinit/internal/cinit"
)

// cForwarding is the C handlers of sigfwd.c.
type cForwarding struct{}

func installForwarding(sigs []syscall.Signal) (forwarding, error) {
	if err := cinit.InstallForwarding(sigs); err != nil {
		if errors.Is(err, cinit.ErrForwarding) {
			return nil, ErrForwarding
		}
		return nil, err
	}
	return cForwarding{}, nil
}

func (cForwarding) attach(pidfd, pid int, _ func(syscall.Signal) error) {
	cinit.AttachForwarding(pidfd, pid)
}
func (cForwarding) detach()    { cinit.DetachForwarding() }
func (cForwarding) uninstall() { cinit.UninstallForwarding() }
