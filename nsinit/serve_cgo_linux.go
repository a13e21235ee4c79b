//go:build linux && cgo

package nsinit

import "github.com/agentrun/agentrun/nsinit/internal/cinit"

// The request types and flags of cinit.h, as nsinit uses them.
const (
	reqExec      = cinit.ReqExec
	reqSignal    = cinit.ReqSignal
	reqSignalAll = cinit.ReqSignalAll
	sigGroup     = cinit.SigGroup
	execTTY      = cinit.ExecTTY
)

// encodeRequest lays r out as the init reads it (cinit.Request).
func encodeRequest(r request) ([]byte, error) {
	cr := cinit.Request{Type: r.typ, ID: r.id, Target: r.target, Flags: r.flags, Sig: r.sig, Winsize: r.winsize,
		Cwd: r.cwd, Path: r.path, Argv: r.argv, Env: r.env}
	return cr.Encode()
}
