// Package session keeps a sandbox alive across many commands. A Host is a
// live session: a serving sandbox of the lifecycle, the processes started
// in it (Exec: argv or a shell line, its own environment, cwd and process
// group, stdio as descriptors or pipes, a timeout, an output cap,
// cancellation), its events (denied calls, process ends) and, when it has
// a name, a unix socket that serves the session protocol
// (docs/session-protocol.md) to processes of the same user outside every
// sandbox. Client speaks that protocol; RunHolder is the process that
// holds a persistent session for the agentrun CLI. Resolve maps a path in
// a session to the host path of its bind, symlink-safe.
package session
