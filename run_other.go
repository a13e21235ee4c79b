//go:build !linux && !darwin

package agentrun

import "context"

// Run is not available on this operating system.
func Run(ctx context.Context, p *Policy, opts Options) (*Result, error) {
	return nil, ErrUnsupported
}
