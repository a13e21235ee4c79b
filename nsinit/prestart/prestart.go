// Package prestart, imported for its effect, lets the agentrun CLI start a
// spawn's sandbox init before the Go runtime starts, from a plan image that
// an earlier spawn with the same flags, working directory and ids cached.
// The sandbox's namespaces and root are then built while Go starts. The
// Go side adopts that init only when the plan it compiles is byte for byte
// the image; otherwise it kills it and spawns the ordinary way (nsinit).
//
// Only a main package should import it: the start runs in the process's
// constructor (nsinit/internal/cinit/prestart.c), and only when the
// arguments are "spawn ... -- CMD". AGENTRUN_PRESTART=0 turns it off.
package prestart
