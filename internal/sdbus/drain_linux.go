package sdbus

import (
	"context"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// awaitDrained returns once the peer has read everything written to c
// (SIOCOUTQ on a unix socket counts the bytes the receiver has not yet
// consumed), or ctx ends. systemd's sd-bus server (seen with 252) does
// not look at bytes that arrived in the same read as the client's BEGIN
// until more data comes, so the first message after BEGIN would wait
// forever; waiting until BEGIN is consumed keeps them apart.
func awaitDrained(ctx context.Context, c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	delay := 20 * time.Microsecond
	for {
		var n int
		var ierr error
		if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
			return err
		}
		if ierr != nil || n == 0 {
			return nil // unknown: go on as any client would
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Millisecond)
	}
}
