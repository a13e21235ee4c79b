// Package fastpath is the agentrun CLI's fast path, before and instead of
// its Go runtime. Linked into the CLI alone, its constructor (prestart.c)
// reads `agentrun spawn ... -- CMD` and starts the spawn's init from the
// plan image an earlier spawn with the same command line, directory, ids
// and passed variables cached, so that the sandbox is built while Go
// starts; with an express record that still holds on the host (express.c),
// it runs the whole spawn without Go. Path hands what the constructor did
// to the library (lifecycle.Prestart), which adopts the init only when its
// own plan is byte for byte the image, and writes the express record of a
// spawn that qualifies. What the fast path shares with the init is
// nsinit/internal/cinit/cinit.h.
package fastpath
