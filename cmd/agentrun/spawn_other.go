//go:build !linux || !cgo

package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/agentrun/agentrun"
)

// runSpawn runs the spawn with the signals that reach the CLI forwarded
// to the command. The channel is never stopped: a second Ctrl-C must not
// cut the clean-up, --result or the exit status short.
func runSpawn(p *agentrun.Policy, opts agentrun.Options, _ fastConfig) (*agentrun.Result, error) {
	ch := make(chan os.Signal, 8)
	for _, s := range forwarded {
		signal.Notify(ch, s)
	}
	opts.Signals = ch
	return agentrun.Run(context.Background(), p, opts)
}

// discardPrestart does nothing: only the Linux CLI prestarts.
func discardPrestart() {}
