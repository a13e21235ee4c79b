package seccomp

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentrun/agentrun/internal/statedir"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Compiler turns a profile into a program; Cache and DiskCache are two.
type Compiler interface {
	Compile(p *specs.LinuxSeccomp) (*Program, error)
}

// DiskCache keeps compiled programs in a private directory so that separate
// processes share them: every CLI spawn is a new process, and compiling the
// default profile costs about 10 ms, more than the rest of a spawn. Entries
// are keyed by the profile hash, the libseccomp version and the
// architecture. The directory must be owned by the caller and writable by
// nobody else, because whoever can write an entry chooses the filter; an
// entry that fails that check or does not parse is recompiled, never used.
type DiskCache struct {
	Dir string
	mem Cache
}

// The stored form of a Program is a small binary record rather than JSON:
// decoding it is on every CLI spawn's path, and JSON's base64 filter and
// name map cost several times the rest of a cache hit.
//
//	"ARSC" u16(version) u32(flags) u32(len) filter
//	u32(n) n × (u16(len) name)                skipped
//	u32(n) n × (u64(key) u16(len) name)       names
//
// Integers are little-endian.
const (
	diskMagic   = "ARSC"
	diskVersion = 1
	diskExt     = ".bin"
)

func encodeEntry(prog *Program) []byte {
	b := make([]byte, 0, 64+len(prog.Filter)+32*len(prog.names))
	b = append(b, diskMagic...)
	b = binary.LittleEndian.AppendUint16(b, diskVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(prog.Flags))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(prog.Filter)))
	b = append(b, prog.Filter...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(prog.Skipped)))
	for _, s := range prog.Skipped {
		b = appendName(b, s)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(prog.names)))
	for k, s := range prog.names {
		b = binary.LittleEndian.AppendUint64(b, k)
		b = appendName(b, s)
	}
	return b
}

func appendName(b []byte, s string) []byte {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// decodeEntry parses a stored record; any inconsistency is an error and
// the caller recompiles.
func decodeEntry(b []byte) (*Program, error) {
	r := entryReader{b: b}
	if string(r.next(len(diskMagic))) != diskMagic || r.u16() != diskVersion {
		return nil, errBadEntry
	}
	prog := &Program{Flags: Flags(r.u32())}
	n := int(r.u32())
	if r.bad || n == 0 || n%8 != 0 || n > maxFilterBytes {
		return nil, errBadEntry
	}
	prog.Filter = bytes.Clone(r.next(n))
	for i, n := 0, int(r.u32()); i < n && !r.bad; i++ {
		prog.Skipped = append(prog.Skipped, r.name())
	}
	n = int(r.u32())
	if n > len(r.b)/10 { // each name takes at least 10 bytes
		return nil, errBadEntry
	}
	if n > 0 {
		prog.names = make(map[uint64]string, n)
	}
	for i := 0; i < n && !r.bad; i++ {
		k := r.u64()
		prog.names[k] = r.name()
	}
	if r.bad || len(r.b) != 0 {
		return nil, errBadEntry
	}
	return prog, nil
}

var errBadEntry = errors.New("seccomp: malformed cache entry")

// entryReader reads a record front to back; a short read sets bad and
// yields zeros from then on.
type entryReader struct {
	b   []byte
	bad bool
}

func (r *entryReader) next(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *entryReader) u16() uint16 {
	if v := r.next(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *entryReader) u32() uint32 {
	if v := r.next(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *entryReader) u64() uint64 {
	if v := r.next(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (r *entryReader) name() string { return string(r.next(int(r.u16()))) }

// Compile returns the program for p from memory, from disk, or compiled.
func (d *DiskCache) Compile(p *specs.LinuxSeccomp) (*Program, error) {
	if p == nil {
		return nil, profileErr("", "no profile")
	}
	h := ProfileHash(p)
	d.mem.mu.Lock()
	prog, ok := d.mem.progs[h]
	d.mem.mu.Unlock()
	if ok {
		return prog, nil
	}
	id := compilerID()
	path := filepath.Join(d.Dir, hex.EncodeToString(h[:])+"-"+id+diskExt)
	euid := os.Geteuid()
	if id != "" {
		if prog := d.load(path, h, euid); prog != nil {
			return d.remember(prog)
		}
	}
	prog, err := d.mem.Compile(p)
	if err != nil {
		return nil, err
	}
	if id != "" {
		// A cache that cannot be written only costs the next process a compile.
		_ = d.store(path, prog, euid)
	}
	return prog, nil
}

func (d *DiskCache) remember(prog *Program) (*Program, error) {
	d.mem.mu.Lock()
	defer d.mem.mu.Unlock()
	if d.mem.progs == nil {
		d.mem.progs = make(map[Hash]*Program)
	}
	d.mem.progs[prog.Hash] = prog
	d.mem.order = append(d.mem.order, prog.Hash)
	return prog, nil
}

func (d *DiskCache) load(path string, h Hash, euid int) *Program {
	if statedir.Private(d.Dir, euid) != nil || statedir.Private(path, euid) != nil {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	prog, err := decodeEntry(b)
	if err != nil {
		return nil
	}
	prog.Hash = h
	return prog
}

func (d *DiskCache) store(path string, prog *Program, euid int) error {
	if err := statedir.Ensure(d.Dir, euid); err != nil {
		return err
	}
	b := encodeEntry(prog)
	tmp, err := os.CreateTemp(d.Dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("seccomp: cache %s: %w", path, err)
	}
	return nil
}

// maxFilterBytes is the kernel's limit: BPF_MAXINSNS (4096) instructions.
const maxFilterBytes = 4096 * 8
