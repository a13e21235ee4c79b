//go:build linux && !cgo

package nsinit

import (
	"errors"
	"syscall"
)

// errNeedCgo is what a Linux build without cgo says on every sandbox it
// is asked for: the init is C, and cgo is how it is linked in.
var errNeedCgo = &StepError{Step: "init", Msg: "this agentrun was built without cgo; the sandbox init is C (rebuild with CGO_ENABLED=1 and a C compiler)"}

func startC(*Config) (*Process, error) { return nil, errNeedCgo }

// installForwarding refuses: without the C init there is no sandbox to
// forward to.
func installForwarding([]syscall.Signal) (forwarding, error) { return nil, errors.New(errNeedCgo.Msg) }

// Request types: without cgo there is no init to send them to.
const (
	reqExec      = 1
	reqSignal    = 2
	reqSignalAll = 3
	sigGroup     = 16
	execTTY      = 8
)

func encodeRequest(request) ([]byte, error) { return nil, errNeedCgo }
