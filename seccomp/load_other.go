//go:build !linux

package seccomp

// SetNoNewPrivs is not supported on this platform.
func SetNoNewPrivs() error { return ErrUnsupported }

// Load is not supported on this platform.
func Load(prog []byte, flags Flags) (listenerFD int, err error) { return -1, ErrUnsupported }
