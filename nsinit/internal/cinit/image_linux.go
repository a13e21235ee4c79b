//go:build linux && cgo

package cinit

/*
#include <stdlib.h>
#include "cinit.h"
*/
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"unsafe"
)

// PPIDSelf in an image's plan stands for the CLI process's pid (getpid()
// in the constructor).
const PPIDSelf = C.AR_PPID_SELF

// Exe identifies the binary an image was written by.
type Exe struct{ Dev, Ino, Size, CtimeSec, CtimeNsec uint64 }

// Prep is an idmapped bind start_core prepares as a detached tree, or the
// root template's lock, which it opens and locks.
type Prep struct {
	Source         string
	UIDMap, GIDMap string // "inside outside count\n" lines
	Attr           uint64 // MOUNT_ATTR_*, MOUNT_ATTR_IDMAP included
	Recursive      bool
	FDIndex        int // its slot in Plan.FDs
	// Template says Source is the root template's lock file, which the
	// start_core opens and locks (no maps, no tree).
	Template bool
}

// IDMaps are what the parent writes to the init's /proc/PID files; an
// empty string is not written.
type IDMaps struct{ Setgroups, UIDMap, GIDMap string }

// Image lays p out as a prestart image (cinit.h): p without its Argv, with
// fds and pid placeholders as the caller put them. The same inputs give the
// same bytes, which is what the adoption check relies on.
func Image(p *Plan, preps []Prep, ids IDMaps, key []byte, exe Exe) ([]byte, error) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return nil, errors.New("cinit: prestart images need a 64-bit process")
	}
	if len(preps) > 16 {
		return nil, errors.New("cinit: more than 16 prepared trees")
	}
	q := *p
	q.Argv = nil // the command comes from the CLI's command line
	strs, err := q.validate()
	if err != nil {
		return nil, err
	}
	strs = append(strs, ids.Setgroups, ids.UIDMap, ids.GIDMap, string(key))
	for _, pr := range preps {
		strs = append(strs, pr.Source, pr.UIDMap, pr.GIDMap)
	}
	// Room for the header, the preps and one reloc per pointer field.
	extra := int(unsafe.Sizeof(C.struct_ar_image{})) + len(preps)*int(unsafe.Sizeof(C.struct_ar_prep{})) + 64
	extra += 8 * (len(strs) + 4*len(q.Mounts) + 2*len(q.Devices) + len(q.Rlimits) + 64)
	for _, m := range q.Mounts {
		extra += 16 * len(m.Params)
	}
	b, err := newBuilder(&q, strs, extra)
	if err != nil {
		return nil, err
	}
	defer b.free()
	hdrs := alloc[C.struct_ar_image](b, 1)
	if hdrs == nil {
		return nil, errArena
	}
	h := &hdrs[0]
	cp, err := b.plan(&q)
	if err != nil {
		return nil, err
	}
	*h = C.struct_ar_image{
		magic:          C.AR_IMAGE_MAGIC,
		version:        1,
		exe_dev:        C.uint64_t(exe.Dev),
		exe_ino:        C.uint64_t(exe.Ino),
		exe_size:       C.uint64_t(exe.Size),
		exe_ctime_sec:  C.uint64_t(exe.CtimeSec),
		exe_ctime_nsec: C.uint64_t(exe.CtimeNsec),
		keylen:         C.uint64_t(len(key)),
		plan:           cp,
		nprep:          C.int(len(preps)),
	}
	if len(key) > 0 {
		h.key = b.str(string(key))
	}
	optStr := func(s string) *C.char {
		if s == "" {
			return nil
		}
		return b.str(s)
	}
	h.setgroups, h.uid_map, h.gid_map = optStr(ids.Setgroups), optStr(ids.UIDMap), optStr(ids.GIDMap)
	if ps := alloc[C.struct_ar_prep](b, len(preps)); ps != nil {
		for i, pr := range preps {
			ps[i] = C.struct_ar_prep{
				source: b.str(pr.Source), uid_map: b.str(pr.UIDMap), gid_map: b.str(pr.GIDMap),
				attr: C.uint64_t(pr.Attr), recursive: cbool(pr.Recursive), fd_index: C.int(pr.FDIndex),
				template: cbool(pr.Template),
			}
		}
		h.prep = &ps[0]
	}
	fields := pointerFields(h)
	rel := alloc[uint64](b, len(fields))
	// The last byte is NUL (cinit.h): no string can run off the end.
	if alloc[byte](b, 1) == nil || b.full {
		return nil, errArena
	}
	base := uintptr(unsafe.Pointer(&b.mem[0]))
	for i, f := range fields {
		rel[i] = uint64(uintptr(f) - base)
		*(*uintptr)(f) -= base
	}
	if len(rel) > 0 {
		h.relocs = C.uint64_t(uintptr(unsafe.Pointer(&rel[0])) - base)
	}
	h.nrelocs = C.uint64_t(len(rel))
	size := (b.off + 15) &^ 15 // whole 16-byte units: the loader's alignment
	if size > uintptr(len(b.mem)) || size > C.AR_IMAGE_MAX {
		return nil, errArena
	}
	h.size = C.uint64_t(size)
	img := bytes.Clone(b.mem[:size])
	sum := fnv.New64a()
	sum.Write(img)
	h.checksum = C.uint64_t(sum.Sum64())
	copy(img, b.mem[:unsafe.Sizeof(*h)])
	return img, nil
}

// pointerFields lists the address of every non-NULL pointer field in the
// image h heads; it only reads, the caller rewrites them after. The loader
// checks every pointer it will follow, so a field missing here makes
// images fail to load rather than point anywhere.
func pointerFields(h *C.struct_ar_image) []unsafe.Pointer {
	var out []unsafe.Pointer
	add := func(field unsafe.Pointer) {
		if *(*uintptr)(field) != 0 {
			out = append(out, field)
		}
	}
	strv := func(v **C.char, n int) {
		for i := 0; n < 0 || i < n; i++ {
			e := at(v, i)
			if *e == nil {
				return
			}
			add(unsafe.Pointer(e))
		}
	}
	add(unsafe.Pointer(&h.key))
	add(unsafe.Pointer(&h.setgroups))
	add(unsafe.Pointer(&h.uid_map))
	add(unsafe.Pointer(&h.gid_map))
	if h.prep != nil {
		for i := 0; i < int(h.nprep); i++ {
			pr := at(h.prep, i)
			add(unsafe.Pointer(&pr.source))
			add(unsafe.Pointer(&pr.uid_map))
			add(unsafe.Pointer(&pr.gid_map))
		}
		add(unsafe.Pointer(&h.prep))
	}
	p := h.plan
	add(unsafe.Pointer(&p.task_fds))
	add(unsafe.Pointer(&p.fds))
	add(unsafe.Pointer(&p.hostname))
	if p.mounts != nil {
		for i := 0; i < int(p.nmounts); i++ {
			m := at(p.mounts, i)
			add(unsafe.Pointer(&m._type))
			add(unsafe.Pointer(&m.dest))
			add(unsafe.Pointer(&m.source))
			if m.params != nil {
				for j := 0; j < int(m.nparams); j++ {
					fp := at(m.params, j)
					add(unsafe.Pointer(&fp.key))
					add(unsafe.Pointer(&fp.value))
				}
				add(unsafe.Pointer(&m.params))
			}
		}
		add(unsafe.Pointer(&p.mounts))
	}
	if p.devices != nil {
		for i := 0; i < int(p.ndevices); i++ {
			d := at(p.devices, i)
			add(unsafe.Pointer(&d.path))
			add(unsafe.Pointer(&d.dest))
		}
		add(unsafe.Pointer(&p.devices))
	}
	if p.masked != nil {
		strv((**C.char)(unsafe.Pointer(p.masked)), int(p.nmasked))
		add(unsafe.Pointer(&p.masked))
	}
	if p.readonly != nil {
		strv((**C.char)(unsafe.Pointer(p.readonly)), int(p.nreadonly))
		add(unsafe.Pointer(&p.readonly))
	}
	add(unsafe.Pointer(&p.cwd))
	if p.rlimits != nil {
		for i := 0; i < int(p.nrlimits); i++ {
			r := at(p.rlimits, i)
			add(unsafe.Pointer(&r.name))
		}
		add(unsafe.Pointer(&p.rlimits))
	}
	if p.envp != nil {
		strv((**C.char)(unsafe.Pointer(p.envp)), -1)
		add(unsafe.Pointer(&p.envp))
	}
	add(unsafe.Pointer(&p.path))
	add(unsafe.Pointer(&h.plan))
	return out
}

// at is &base[i] of a C array.
func at[T any](base *T, i int) *T {
	return (*T)(unsafe.Add(unsafe.Pointer(base), uintptr(i)*unsafe.Sizeof(*base)))
}

// LoadImage runs the C loader on a copy of img, as the constructor would,
// and reports whether it accepts it; for tests.
func LoadImage(img []byte, checkSum bool) error {
	if len(img) == 0 || len(img) > C.AR_IMAGE_MAX {
		return fmt.Errorf("cinit: image of %d bytes", len(img))
	}
	mem := C.aligned_alloc(16, C.size_t((len(img)+15)&^15))
	if mem == nil {
		return errors.New("cinit: no memory")
	}
	defer C.free(mem)
	buf := unsafe.Slice((*byte)(mem), len(img))
	copy(buf, img)
	var h *C.struct_ar_image
	if C.ar_image_load((*C.uchar)(mem), C.uint64_t(len(img)), cbool(checkSum), &h) == nil {
		return errors.New("cinit: image rejected")
	}
	return nil
}
