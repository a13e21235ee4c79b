//go:build linux && cgo

package prestart

// A cgo package, so that enable.c, which defines the symbol the
// constructor looks for, is compiled in; the constructor itself lives in
// nsinit/internal/cinit.

import "C"

import _ "github.com/agentrun/agentrun/nsinit/internal/cinit"
