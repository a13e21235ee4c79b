//go:build !linux

package sdbus

import (
	"context"
	"net"
)

// awaitDrained is a no-op where SIOCOUTQ is unknown (see drain_linux.go).
func awaitDrained(context.Context, net.Conn) error { return nil }
