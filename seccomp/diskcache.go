package seccomp

import (
	"encoding/hex"
	"encoding/json"
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

// diskEntry is the stored form of a Program.
type diskEntry struct {
	Filter  []byte            `json:"filter"`
	Flags   Flags             `json:"flags"`
	Skipped []string          `json:"skipped,omitempty"`
	Names   map[uint64]string `json:"names,omitempty"`
}

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
	path := filepath.Join(d.Dir, hex.EncodeToString(h[:])+"-"+id+".json")
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
	var e diskEntry
	if json.Unmarshal(b, &e) != nil || len(e.Filter) == 0 || len(e.Filter)%8 != 0 || len(e.Filter) > maxFilterBytes {
		return nil
	}
	return &Program{Filter: e.Filter, Flags: e.Flags, Hash: h, Skipped: e.Skipped, names: e.Names}
}

func (d *DiskCache) store(path string, prog *Program, euid int) error {
	if err := statedir.Ensure(d.Dir, euid); err != nil {
		return err
	}
	b, err := json.Marshal(diskEntry{Filter: prog.Filter, Flags: prog.Flags, Skipped: prog.Skipped, Names: prog.names})
	if err != nil {
		return err
	}
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
