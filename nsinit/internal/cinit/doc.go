// Package cinit is the sandbox init written in C, cloned straight from the
// Go parent through cgo: no re-exec of the binary and no second Go runtime
// on the spawn path. nsinit compiles an OCI Spec into a Plan; Start clones a
// child that executes it with the same steps, order and sync protocol as
// nsinit's Go init. It exists only in cgo builds on Linux.
package cinit
