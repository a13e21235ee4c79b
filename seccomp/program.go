package seccomp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Flags are seccomp(2) SECCOMP_FILTER_FLAG_* bits; the values are the
// kernel's.
type Flags uint32

const (
	// FlagTSync applies the filter to every thread of the calling process,
	// not only the calling thread.
	FlagTSync Flags = 1 << 0
	// FlagLog logs every action except allow to the audit log.
	FlagLog Flags = 1 << 1
	// FlagSpecAllow disables the speculative store bypass mitigation.
	FlagSpecAllow Flags = 1 << 2
	// FlagNewListener makes seccomp(2) return a user-notification listener
	// fd. Compile sets it for programs with SCMP_ACT_NOTIFY.
	FlagNewListener Flags = 1 << 3
	// FlagTSyncESRCH makes a failed TSYNC return ESRCH instead of a thread
	// id; the kernel needs it to combine TSYNC with a listener.
	FlagTSyncESRCH Flags = 1 << 4
	// FlagWaitKillableRecv makes a notifying task ignore non-fatal signals
	// once the listener has received the notification (Linux 5.19).
	FlagWaitKillableRecv Flags = 1 << 5
)

// Hash identifies a profile: equal profiles (field for field) have equal
// hashes.
type Hash [sha256.Size]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Program is a compiled filter, ready to be handed to Load in the sandbox
// init. Treat it as read-only: programs from a Cache are shared between
// callers.
type Program struct {
	// Filter is the BPF program: an array of struct sock_filter (8 bytes
	// each) in native byte order, as seccomp(2) takes it.
	Filter []byte
	// Flags are to be passed to Load: the profile's flags, plus
	// FlagNewListener when the program has SCMP_ACT_NOTIFY actions.
	Flags Flags
	// Hash is the hash of the profile the program was compiled from.
	Hash Hash
	// Skipped lists syscall names that the installed libseccomp does not
	// know and that were therefore left out, as runc does. Such a syscall
	// gets the default action. It is meant for a verbose log line.
	Skipped []string

	// names maps (audit arch, syscall number) to a name for the syscalls
	// whose rules notify, so that the Notifier can name them without
	// libseccomp.
	names map[uint64]string
	// compact reports whether Filter is compact.go's program, not
	// libseccomp's (set by a compile, not kept in the disk cache; for
	// tests).
	compact bool
}

// NeedsListener reports whether Load must be asked for a listener and a
// Notifier must serve it.
func (p *Program) NeedsListener() bool { return p.Flags&FlagNewListener != 0 }

func nameKey(auditArch uint32, nr int32) uint64 { return uint64(auditArch)<<32 | uint64(uint32(nr)) }

// syscallName names a syscall for a report.
func (p *Program) syscallName(auditArch uint32, nr int32) string {
	if p != nil {
		if n, ok := p.names[nameKey(auditArch, nr)]; ok {
			return n
		}
	}
	return fmt.Sprintf("syscall_%d", nr)
}

// ProfileHash returns the hash Cache uses as its key. It hashes the fields
// directly rather than a JSON encoding, which keeps a cache hit in the
// microseconds.
func ProfileHash(p *specs.LinuxSeccomp) Hash {
	w := hashWriter{h: sha256.New(), buf: make([]byte, 0, 8<<10+256)}
	w.str("agentrun-seccomp-v1")
	w.str(string(p.DefaultAction))
	w.optUint(p.DefaultErrnoRet)
	w.num(uint64(len(p.Architectures)))
	for _, a := range p.Architectures {
		w.str(string(a))
	}
	w.num(uint64(len(p.Flags)))
	for _, f := range p.Flags {
		w.str(string(f))
	}
	w.str(p.ListenerPath)
	w.str(p.ListenerMetadata)
	w.num(uint64(len(p.Syscalls)))
	for _, sc := range p.Syscalls {
		w.num(uint64(len(sc.Names)))
		for _, n := range sc.Names {
			w.str(n)
		}
		w.str(string(sc.Action))
		w.optUint(sc.ErrnoRet)
		w.num(uint64(len(sc.Args)))
		for _, a := range sc.Args {
			w.num(uint64(a.Index))
			w.num(a.Value)
			w.num(a.ValueTwo)
			w.str(string(a.Op))
		}
	}
	return w.sum()
}

// hashWriter writes length-prefixed fields so that no two profiles share an
// encoding. It batches them in a buffer: per-field writes into the hash
// would allocate for every string.
type hashWriter struct {
	h   hash.Hash
	buf []byte
}

func (w *hashWriter) flushIfFull() {
	if len(w.buf) >= 8<<10 {
		w.h.Write(w.buf)
		w.buf = w.buf[:0]
	}
}

func (w *hashWriter) num(v uint64) {
	w.buf = binary.AppendUvarint(w.buf, v)
	w.flushIfFull()
}

func (w *hashWriter) str(s string) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	w.buf = append(w.buf, s...)
	w.flushIfFull()
}

func (w *hashWriter) optUint(v *uint) {
	if v == nil {
		w.num(0)
		return
	}
	w.num(1)
	w.num(uint64(*v))
}

func (w *hashWriter) sum() Hash {
	w.h.Write(w.buf)
	var out Hash
	w.h.Sum(out[:0])
	return out
}

// DefaultCacheSize bounds a zero Cache.
const DefaultCacheSize = 32

// Cache memoises Compile by profile hash, so that repeated spawns with the
// same profile skip libseccomp. The zero value is ready to use and holds up
// to DefaultCacheSize programs; it is safe for concurrent use. The caller
// owns it (typically one per process or per runner); the package keeps no
// state of its own.
type Cache struct {
	// Max bounds the number of programs kept; zero means DefaultCacheSize.
	// Set it before first use.
	Max int

	mu    sync.Mutex
	progs map[Hash]*Program
	order []Hash // insertion order, for eviction
}

// Compile returns the cached program for p, compiling it on a miss. Errors
// are not cached. Concurrent misses on the same profile compile once: the
// lock is held while compiling, which costs other profiles a short wait but
// keeps a burst of identical spawns from compiling in parallel.
func (c *Cache) Compile(p *specs.LinuxSeccomp) (*Program, error) {
	if p == nil {
		return nil, profileErr("", "no profile")
	}
	h := ProfileHash(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if prog, ok := c.progs[h]; ok {
		return prog, nil
	}
	prog, err := compileHashed(p, h)
	if err != nil {
		return nil, err
	}
	if c.progs == nil {
		c.progs = make(map[Hash]*Program)
	}
	max := c.Max
	if max <= 0 {
		max = DefaultCacheSize
	}
	for len(c.order) >= max {
		delete(c.progs, c.order[0])
		c.order = c.order[1:]
	}
	c.progs[h] = prog
	c.order = append(c.order, h)
	return prog, nil
}

// Len returns the number of cached programs.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.progs)
}

// Compile turns a profile into a BPF program with libseccomp. It runs in
// the parent; the child only loads the bytes (see Load). The profile is
// validated first; syscall names the installed libseccomp does not know are
// skipped and listed in Program.Skipped. Architectures the running kernel
// cannot execute (aarch64 on an x86_64 host) are left out, since their part
// of the program could never run; syscalls from an architecture that is not
// in the program (i386 or x32 on x86_64 unless listed) kill the process.
//
// Compile needs cgo and libseccomp; elsewhere it returns ErrUnsupported.
// Use a Cache to compile each profile once.
func Compile(p *specs.LinuxSeccomp) (*Program, error) {
	if p == nil {
		return nil, profileErr("", "no profile")
	}
	return compileHashed(p, ProfileHash(p))
}

const (
	// sockFilterSize is sizeof(struct sock_filter).
	sockFilterSize = 8
	// maxInstructions is BPF_MAXINSNS, the kernel's limit per program.
	maxInstructions = 4096
)
