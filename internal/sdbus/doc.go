// Package sdbus is a small D-Bus client for talking to systemd managers:
// SASL EXTERNAL authentication, the wire format for the handful of
// signatures agentrun needs, method calls with context deadlines, and
// JobRemoved signals. A Conn is shared by goroutines (replies matched by
// serial number); a Client adds what many goroutines of one process need
// from one manager: a connection opened on demand and again after a
// break, one request at a time with a time limit each, and requests
// repeated where that is safe.
//
// It exists instead of github.com/godbus/dbus/v5 because the agentrun
// binary is re-executed on every spawn and its start-up time is measured
// (see cgroups/doc.go): this package adds no init-time work and little
// code, and only the rootless cgroup path without a delegated cgroup uses
// it at all.
//
// Messages are encoded little-endian; both byte orders decode. Decoding
// enforces the specification's limits (message and array sizes, signature
// length and nesting), so a hostile or broken peer yields an error, never
// a panic or an unbounded allocation (FuzzUnmarshal).
package sdbus
