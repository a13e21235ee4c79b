//go:build linux && cgo

package main

import (
	"context"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/cmd/agentrun/internal/fastpath"
	"github.com/agentrun/agentrun/nsinit"
)

// runSpawn runs the spawn with the CLI's own signal forwarding and fast
// path: the init its constructor may have started (prestart), and the
// express record that lets the next such spawn run without Go.
func runSpawn(p *agentrun.Policy, opts agentrun.Options, fast fastConfig) (*agentrun.Result, error) {
	// Forwarded, and held while the sandbox is built, without os/signal,
	// whose hooks cost a thread and a hand-off each. Never stopped: a
	// second Ctrl-C must not cut the clean-up, --result or the exit status
	// short.
	fw, err := nsinit.ForwardSignals(forwarded)
	if err != nil {
		return nil, &agentrun.SetupError{Step: "signals", Err: err}
	}
	fp := fastpath.New(fastpath.Config{Signals: forwarded, Record: fast.record, Eligible: fast.eligible})
	return agentrun.RunWith(context.Background(), p, opts, agentrun.Hooks{Host: fp.HostInfo(), Forwarder: fw, Prestart: fp})
}

// discardPrestart ends an init the constructor started that this spawn did
// not take (a refused command line or policy) now, not only at exit.
func discardPrestart() { fastpath.Discard() }
