//go:build linux && cgo

package cinit

/*
#cgo CFLAGS: -O2 -Wall -Wextra -fno-strict-aliasing -fstack-clash-protection
#include "cinit.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MountKind says how the init creates a mount.
type MountKind int

// Mount kinds; the values are cinit.h's AR_MOUNT_*.
const (
	// Bind attaches a clone of a host path, or a tree the parent prepared.
	Bind MountKind = C.AR_MOUNT_BIND
	// FS mounts a new filesystem instance (tmpfs, proc, devpts, ...).
	FS MountKind = C.AR_MOUNT_FS
	// Symlink creates a symlink at Dest pointing at Source.
	Symlink MountKind = C.AR_MOUNT_SYMLINK
)

// MaxEntries bounds the fds, mounts and devices of a Plan.
const MaxEntries = C.AR_MAX_ENTRIES

// FSParam is one fsconfig parameter; Flag means a key without a value.
type FSParam struct {
	Key, Value string
	Flag       bool
}

// Mount is one step of the root assembly, in Spec order.
type Mount struct {
	Kind MountKind
	// Type is the OCI mount type, used in error reports.
	Type string
	// Dest is the clean absolute path inside the new root.
	Dest string
	// Source is the host path (Bind), the filesystem type (FS) or the link
	// target (Symlink).
	Source string
	// FD is the child fd of a detached tree the parent prepared (Bind), or
	// -1 to clone Source.
	FD        int
	Recursive bool
	// Attr are the MOUNT_ATTR_* bits of the new mount.
	Attr   uint64
	Params []FSParam
}

// Device is a host device node cloned into the new root.
type Device struct{ Path, Dest string }

// Rlimit is one resource limit for the command.
type Rlimit struct {
	Name       string
	Resource   int
	Soft, Hard uint64
}

// Plan is everything the C init does, flattened from the Spec by the
// caller. The child numbers its fds by their index in FDs.
type Plan struct {
	CloneFlags uint64
	// CgroupFD is a cgroup v2 directory to clone into (CLONE_INTO_CGROUP),
	// or -1.
	CgroupFD int
	// FDs become the child's fds 0..len-1: stdio, then the sync socket at
	// SyncFD, then prepared trees.
	FDs    []int
	SyncFD int

	UID, GID uint32
	// DropGroups clears the supplementary groups (root mode).
	DropGroups bool
	// ExpectPPID is the child's getppid() while the parent lives, or -1
	// when it cannot be known (a new PID namespace shows 0).
	ExpectPPID int
	// UnshareCgroupNS makes the child unshare its cgroup namespace once
	// released, i.e. after the parent placed it in its cgroup.
	UnshareCgroupNS bool

	Hostname     string
	Mounts       []Mount
	Devices      []Device
	Masked       []string
	Readonly     []string
	RootReadonly bool
	Loopback     bool

	Cwd     string
	Rlimits []Rlimit
	Argv    []string
	Env     []string
	// Path is the command's PATH for looking up Argv[0].
	Path       string
	NoNewPrivs bool
}

// Start clones the init that executes p and returns its pid. The sync
// protocol has two steps before the reports: one byte once the parent has
// written the id maps (the child then builds the root), and the release
// message (Release) once the init sits in its cgroup and the filter is
// compiled (the child then loads it and starts the command).
//
// Call Start on a goroutine locked to its OS thread that stays locked until
// the child has been reaped: the child's parent death signal fires when the
// thread that cloned it exits.
func Start(p *Plan) (int, error) {
	if err := p.validate(); err != nil {
		return 0, err
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	b := builder{pin: &pin}
	cp := b.plan(p)
	r := C.ar_start(cp)
	if r < 0 {
		return 0, unix.Errno(-r)
	}
	return int(r), nil
}

// Release is the message that lets the init start the command: the
// seccomp filter (struct sock_filter[], empty for none) and its
// SECCOMP_FILTER_FLAG_* flags.
func Release(filter []byte, flags uint32) ([]byte, error) {
	if len(filter)%8 != 0 || 4+len(filter) > C.AR_RELEASE_MAX {
		return nil, fmt.Errorf("cinit: seccomp program of %d bytes is not a sock_filter array of at most 4096 instructions", len(filter))
	}
	msg := make([]byte, 4, 4+len(filter))
	binary.NativeEndian.PutUint32(msg, flags)
	return append(msg, filter...), nil
}

// UsernsHolder clones a child into a new user namespace that blocks reading
// pipeRead until the write end closes or it is killed. The caller writes
// its maps, opens /proc/PID/ns/user and kills and reaps it.
func UsernsHolder(pipeRead int) (int, error) {
	r := C.ar_userns_holder(C.int(pipeRead))
	if r < 0 {
		return 0, unix.Errno(-r)
	}
	return int(r), nil
}

func (p *Plan) validate() error {
	switch {
	case len(p.Argv) == 0:
		return errors.New("cinit: no command")
	case len(p.FDs) < 4 || p.SyncFD < 3 || p.SyncFD >= len(p.FDs):
		return errors.New("cinit: fds must hold stdio and the sync socket")
	case len(p.FDs) > MaxEntries || len(p.Mounts) > MaxEntries || len(p.Devices) > MaxEntries:
		return fmt.Errorf("cinit: more than %d fds, mounts or devices", MaxEntries)
	}
	strs := []string{p.Hostname, p.Cwd, p.Path}
	strs = append(strs, p.Argv...)
	strs = append(strs, p.Env...)
	strs = append(strs, p.Masked...)
	strs = append(strs, p.Readonly...)
	for _, m := range p.Mounts {
		strs = append(strs, m.Dest, m.Source)
		for _, fp := range m.Params {
			strs = append(strs, fp.Key, fp.Value)
		}
	}
	for _, d := range p.Devices {
		strs = append(strs, d.Path, d.Dest)
	}
	for _, s := range strs {
		if strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("cinit: %q contains a NUL byte", s)
		}
	}
	return nil
}

// builder lays the plan out as C structs in pinned Go memory: the child is
// a copy of this process, so it reads the same bytes without any copying,
// and the parent only needs them for the duration of ar_start.
type builder struct{ pin *runtime.Pinner }

func (b *builder) str(s string) *C.char {
	buf := make([]byte, len(s)+1)
	copy(buf, s)
	b.pin.Pin(&buf[0])
	return (*C.char)(unsafe.Pointer(&buf[0]))
}

// strs returns a NULL-terminated array.
func (b *builder) strs(ss []string) **C.char {
	arr := make([]*C.char, len(ss)+1)
	for i, s := range ss {
		arr[i] = b.str(s)
	}
	b.pin.Pin(&arr[0])
	return &arr[0]
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

func (b *builder) plan(p *Plan) *C.struct_ar_plan {
	cp := &C.struct_ar_plan{
		clone_flags:      C.uint64_t(p.CloneFlags),
		cgroup_fd:        C.int(p.CgroupFD),
		nfds:             C.int(len(p.FDs)),
		sync_fd:          C.int(p.SyncFD),
		uid:              C.uint32_t(p.UID),
		gid:              C.uint32_t(p.GID),
		drop_groups:      cbool(p.DropGroups),
		expect_ppid:      C.int(p.ExpectPPID),
		unshare_cgroupns: cbool(p.UnshareCgroupNS),
		root_readonly:    cbool(p.RootReadonly),
		loopback:         cbool(p.Loopback),
		cwd:              b.str(p.Cwd),
		argv:             b.strs(p.Argv),
		envp:             b.strs(p.Env),
		path:             b.str(p.Path),
		no_new_privs:     cbool(p.NoNewPrivs),
	}
	fds := make([]C.int, len(p.FDs))
	for i, fd := range p.FDs {
		fds[i] = C.int(fd)
	}
	b.pin.Pin(&fds[0])
	cp.fds = &fds[0]
	if p.Hostname != "" {
		cp.hostname = b.str(p.Hostname)
	}
	if len(p.Mounts) > 0 {
		ms := make([]C.struct_ar_mount, len(p.Mounts))
		for i, m := range p.Mounts {
			ms[i] = C.struct_ar_mount{
				kind:      C.int(m.Kind),
				fd:        C.int(m.FD),
				recursive: cbool(m.Recursive),
				attr:      C.uint64_t(m.Attr),
				_type:     b.str(m.Type),
				dest:      b.str(m.Dest),
				source:    b.str(m.Source),
				nparams:   C.int(len(m.Params)),
			}
			if len(m.Params) > 0 {
				ps := make([]C.struct_ar_fsparam, len(m.Params))
				for j, fp := range m.Params {
					ps[j].key = b.str(fp.Key)
					if !fp.Flag {
						ps[j].value = b.str(fp.Value)
					}
				}
				b.pin.Pin(&ps[0])
				ms[i].params = &ps[0]
			}
		}
		b.pin.Pin(&ms[0])
		cp.mounts, cp.nmounts = &ms[0], C.int(len(ms))
	}
	if len(p.Devices) > 0 {
		ds := make([]C.struct_ar_device, len(p.Devices))
		for i, d := range p.Devices {
			ds[i] = C.struct_ar_device{path: b.str(d.Path), dest: b.str(d.Dest)}
		}
		b.pin.Pin(&ds[0])
		cp.devices, cp.ndevices = &ds[0], C.int(len(ds))
	}
	if len(p.Masked) > 0 {
		cp.masked, cp.nmasked = b.strs(p.Masked), C.int(len(p.Masked))
	}
	if len(p.Readonly) > 0 {
		cp.readonly, cp.nreadonly = b.strs(p.Readonly), C.int(len(p.Readonly))
	}
	if len(p.Rlimits) > 0 {
		rs := make([]C.struct_ar_rlimit, len(p.Rlimits))
		for i, r := range p.Rlimits {
			rs[i] = C.struct_ar_rlimit{name: b.str(r.Name), resource: C.int(r.Resource), soft: C.uint64_t(r.Soft), hard: C.uint64_t(r.Hard)}
		}
		b.pin.Pin(&rs[0])
		cp.rlimits, cp.nrlimits = &rs[0], C.int(len(rs))
	}
	return cp
}
