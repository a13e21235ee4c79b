//go:build linux && cgo

package fastpath

/*
#cgo CFLAGS: -O2 -Wall -Wextra -fno-strict-aliasing -fstack-clash-protection -I${SRCDIR}/../../../../nsinit/internal/cinit
#include <stdlib.h>
#include "fastpath.h"
*/
import "C"

import (
	"encoding/binary"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
)

// Config is what the CLI knows of a spawn that decides its fast path.
type Config struct {
	// Signals are the signals the CLI forwards to the sandbox, from its
	// start until it exits: the express path forwards the same.
	Signals []syscall.Signal
	// Record says the express path is on (AGENTRUN_EXPRESS does not turn
	// it off, and the command line splits at its first "--"): an adopted
	// init's express record is written, or one that no longer applies
	// removed.
	Record bool
	// Eligible says the spawn's outcome is its exit status alone (no
	// --result, no --verbose, no timeout), which is all the express path
	// can give.
	Eligible bool
}

// Path is one spawn's fast path, as the CLI's constructor left it. It
// implements lifecycle.Prestart; with Config.Record it also records the
// host reads of the spawn's compilation (HostInfo), which the express
// record fingerprints.
type Path struct {
	cfg Config
	rec *hostRecorder

	once  sync.Once
	pre   nsinit.Prestarted
	ok    bool
	path  string // the cache file of this spawn's key
	image []byte // the image the init was started from
	// held: the express record still held on this spawn, which stood
	// aside for another reason; unhashed: the key names a policy file
	// the constructor could not hash, so no record applies.
	held, unhashed bool
}

// New returns the fast path of the spawn the constructor looked at.
func New(cfg Config) *Path {
	p := &Path{cfg: cfg}
	if cfg.Record {
		p.rec = &hostRecorder{}
	}
	return p
}

// HostInfo is the HostInfo to compile the spawn's Policy with: with the
// express path in play, every host read goes through the recorder.
func (p *Path) HostInfo() *agentrun.HostInfo {
	if p.rec == nil {
		return nil
	}
	r := p.rec
	return &agentrun.HostInfo{Lstat: r.lstat, Readlink: r.readlink, Resolve: r.resolve, Owner: r.owner, ReadFile: r.readFile}
}

// take reads what the constructor did, once (ar_prestart_take).
func (p *Path) take() {
	p.once.Do(func() {
		r := C.ar_prestart_take()
		if r.state == C.AR_PRESTART_OFF {
			return
		}
		p.ok = true
		p.path = C.GoString(r.path)
		p.held, p.unhashed = r.express_held != 0, r.no_express != 0
		pre := nsinit.Prestarted{
			Key: C.GoBytes(unsafe.Pointer(r.key), C.int(r.keylen)),
			Exe: nsinit.Exe{Dev: uint64(r.exe_dev), Ino: uint64(r.exe_ino), Size: uint64(r.exe_size),
				CtimeSec: uint64(r.exe_ctime_sec), CtimeNsec: uint64(r.exe_ctime_nsec)},
		}
		for i := 0; *at(r.argv, i) != nil; i++ {
			pre.Argv = append(pre.Argv, C.GoString(*at(r.argv, i)))
		}
		if r.state == C.AR_PRESTART_STARTED {
			pre.Started = true
			pre.Pid, pre.Sock = int(r.pid), int(r.sock)
			pre.Image = C.GoBytes(unsafe.Pointer(r.image), C.int(r.image_len))
			p.image = pre.Image
		}
		p.pre = pre
	})
}

// at is v[i] of a C array of strings.
func at(v **C.char, i int) **C.char {
	return (**C.char)(unsafe.Add(unsafe.Pointer(v), uintptr(i)*unsafe.Sizeof(v)))
}

// Take returns what the constructor did for this spawn, once.
func (p *Path) Take() (nsinit.Prestarted, bool) {
	p.take()
	pre, ok := p.pre, p.ok
	p.pre, p.ok = nsinit.Prestarted{}, false
	return pre, ok
}

// Discard kills an init the constructor started that no spawn took (the
// command line was refused, say). Its parent death signal would end it at
// exit anyway; this ends it now. After a Path took it, there is nothing
// left to discard.
func Discard() {
	p := &Path{}
	if pre, ok := p.Take(); ok {
		pre.Discard()
	}
}

// Cache stores image where the constructor of the next spawn with the
// same key looks for it.
func (p *Path) Cache(image []byte) {
	if p.path != "" {
		cacheImage(p.path, image)
	}
}

// Forget removes the image and express record of this spawn's key.
func (p *Path) Forget() {
	if p.path != "" {
		_ = os.Remove(p.path)
		_ = os.Remove(p.path + expressSuffix)
	}
}

// Adopted writes the express record of the adopted init's image, or
// removes one that no longer applies: a spawn that no longer qualifies (a
// warning, say) must not leave the record of one that did.
func (p *Path) Adopted(release []byte, b lifecycle.Built) {
	if !p.cfg.Record || p.path == "" {
		return
	}
	var x *Express
	if p.cfg.Eligible {
		x = expressFor(p.rec, p.cfg.Signals, b)
	}
	switch {
	case x == nil || p.unhashed:
		_ = os.Remove(p.path + expressSuffix)
	case !p.held && len(p.image) >= 24:
		if rec := expressRecord(binary.NativeEndian.Uint64(p.image[16:24]), release, x); rec != nil {
			writeCached(p.path+expressSuffix, rec)
		}
	}
}

// The C side's names (fastpath.h), for the test that holds them equal to
// the Go side's.
const (
	cExpressSuffix = C.EXPRESS_SUFFIX
	cLeafPrefix    = C.EXPRESS_LEAF_PREFIX
)

// passEnv is the constructor's list of the variables whose values are part
// of its key: the ones that reach the command (internal/passenv).
func passEnv() []string {
	var out []string
	v := C.ar_prestart_pass_env()
	for i := 0; *at(v, i) != nil; i++ {
		out = append(out, C.GoString(*at(v, i)))
	}
	return out
}

// parseExpressLeaf is the express path's reading of an express cgroup's
// name (ar_express_parse_leaf), for tests against cgroups.ParseExpressName.
func parseExpressLeaf(name string) (pid int, start, pidns uint64, ok bool) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var pp, s, n C.ulonglong
	if C.ar_express_parse_leaf(cs, &pp, &s, &n) != 0 {
		return 0, 0, 0, false
	}
	return int(pp), uint64(s), uint64(n), true
}
