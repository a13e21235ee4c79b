//go:build !linux

package seccomp

// Notifier is not available on this platform.
type Notifier struct{}

// NewNotifier is not supported on this platform.
func NewNotifier(listenerFD int, prog *Program, onEvent func(Event)) (*Notifier, error) {
	return nil, ErrUnsupported
}

// Done returns a closed channel.
func (n *Notifier) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Close does nothing.
func (n *Notifier) Close() error { return nil }

// Events returns nothing.
func (n *Notifier) Events() []Event { return nil }

// Dropped returns 0.
func (n *Notifier) Dropped() int { return 0 }
