//go:build linux

package main

import (
	"errors"
	"io"
	"os"
	"sync"

	"github.com/agentrun/agentrun/session"
	"golang.org/x/sys/unix"
)

// terminal is the caller's terminal on stdin, put in raw mode while a
// command on a terminal of the sandbox's runs, and restored after.
type terminal struct {
	saved *unix.Termios
	once  sync.Once
}

// openTerminal checks that stdin is a terminal.
func openTerminal() (*terminal, error) {
	t, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		return nil, errors.New("stdin is not a terminal (run it from one, or leave out -t)")
	}
	return &terminal{saved: t}, nil
}

// size is the terminal's size, nil when it cannot be read.
func (t *terminal) size() *session.Winsize {
	ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
	if err != nil {
		return nil
	}
	return &session.Winsize{Rows: ws.Row, Cols: ws.Col}
}

// raw puts the terminal in raw mode (cfmakeraw): every byte goes through
// as typed, and the sandbox's terminal does the line editing and echo.
func (t *terminal) raw() error {
	r := *t.saved
	r.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	r.Oflag &^= unix.OPOST
	r.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	r.Cflag &^= unix.CSIZE | unix.PARENB
	r.Cflag |= unix.CS8
	r.Cc[unix.VMIN], r.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(0, unix.TCSETS, &r)
}

// restore puts the terminal back as it was; nil and repeated calls are
// harmless.
func (t *terminal) restore() {
	if t == nil {
		return
	}
	t.once.Do(func() { _ = unix.IoctlSetTermios(0, unix.TCSETS, t.saved) })
}

// relayTerminal is f, or, when f is a terminal, f wrapped so that the
// session client relays its bytes instead of passing the descriptor.
func relayTerminal(f *os.File) io.ReadWriter {
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return f
	}
	return struct {
		io.Reader
		io.Writer
	}{f, f}
}
