// Package cinit is the sandbox init, written in C and cloned straight from
// the Go parent through cgo: no re-exec of the binary and no second Go
// runtime on the spawn path. nsinit encodes an OCI Spec as a Plan; Start
// clones a child that builds the root, drops every privilege, loads the
// filter and runs the command as PID 1. The package also holds the idmap
// holder, the plan image (the Plan as bytes, which the CLI's constructor
// caches and starts from: cmd/agentrun/internal/fastpath) and the C signal
// forwarder. In serve mode the init runs a process per exec request on
// the sync socket instead of one command. It exists only in cgo builds on
// Linux.
package cinit
