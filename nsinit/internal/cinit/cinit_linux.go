//go:build linux && cgo

package cinit

/*
#cgo CFLAGS: -O2 -Wall -Wextra -fno-strict-aliasing -fstack-clash-protection
// Bind every symbol at load time: a serving init calls into libc long
// after forget_parent unmapped what a lazy binding would need.
#cgo LDFLAGS: -Wl,-z,now
#include <stdlib.h>
#include "cinit.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"syscall"
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
	// Copy writes a copy of the regular file Source at Dest.
	Copy MountKind = C.AR_MOUNT_COPY
)

// ExitSetupFailed is the init's exit status when the sandbox could not be
// built (cinit.h's AR_EXIT_SETUP_FAILED).
const ExitSetupFailed = C.AR_EXIT_SETUP_FAILED

// TypeRootTemplate is the mount type the init binds as the root template
// (cinit.h's AR_TYPE_ROOT_TEMPLATE).
const TypeRootTemplate = C.AR_TYPE_ROOT_TEMPLATE

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
	// TaskFDs are v1 "tasks" files (parent fds) the child writes "0" to
	// before anything else, joining each hierarchy's cgroup as a single
	// thread.
	TaskFDs []int
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
	// KeepCaps are the capabilities the command is granted (bit n of the
	// 64 = capability n): kept in the bounding set, raised as ambient.
	KeepCaps uint64
	// Serve makes a session's init: no command (Argv is unused); once
	// confined it serves Requests on the sync socket until the parent
	// hangs up. The filter must allow what that needs (ServeCheck).
	Serve bool
}

// Start clones the init that executes p and returns its pid. The sync
// protocol has two steps before the reports: one byte once the parent has
// written the id maps (the child then builds the root), and the release
// message (Release) once the init sits in its cgroup and the filter is
// compiled (the child then loads it and starts the command).
//
// Call Start on a goroutine locked to its OS thread that stays locked until
// the child has been reaped: the child's parent death signal fires when the
// thread that cloned the child exits.
func Start(p *Plan) (int, error) {
	if len(p.Argv) == 0 && !p.Serve {
		return 0, errors.New("cinit: no command")
	}
	strs, err := p.validate()
	if err != nil {
		return 0, err
	}
	b, err := newBuilder(p, strs, 0)
	if err != nil {
		return 0, err
	}
	defer b.free()
	cp, err := b.plan(p)
	if err != nil {
		return 0, err
	}
	// Addresses the child's first act (shed_parent) uses to find its copy
	// of the Go heap: a fresh heap object, and this goroutine's stack,
	// which the runtime also allocates from the heap arenas.
	var onStack byte
	mark := new([16]byte)
	cp.heap[0] = C.uintptr_t(uintptr(unsafe.Pointer(mark)))
	cp.heap[1] = C.uintptr_t(uintptr(unsafe.Pointer(&onStack)))
	cp.nheap = 2
	// ar_start marks the Go heap MADV_DONTFORK around its clone. A fork
	// by os/exec in that window would leave its child without the heap
	// and the goroutine stack it runs on: Go starts a child in a user
	// namespace (a caller's own, say) with a
	// plain fork whose child runs Go code until it execs. Go holds
	// ForkLock for writing across its fork, so holding it for reading here
	// keeps the two apart; C inits still clone side by side.
	syscall.ForkLock.RLock()
	r := C.ar_start(cp)
	syscall.ForkLock.RUnlock()
	runtime.KeepAlive(mark)
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
// its maps, opens /proc/PID/ns/user, kills it, and calls reaped once it has
// reaped it: the child runs on memory that is freed then.
func UsernsHolder(pipeRead int) (pid int, reaped func(), err error) {
	const stackSize = 64 << 10
	stack, err := unix.Mmap(-1, 0, stackSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_STACK)
	if err != nil {
		return 0, nil, fmt.Errorf("cinit: holder stack: %w", err)
	}
	r := C.ar_userns_holder(C.int(pipeRead), unsafe.Pointer(&stack[0]), C.size_t(len(stack)))
	if r < 0 {
		_ = unix.Munmap(stack)
		return 0, nil, unix.Errno(-r)
	}
	return int(r), func() { _ = unix.Munmap(stack) }, nil
}

// ErrForwarding is returned by InstallForwarding while another forwarding
// of this process is installed.
var ErrForwarding = errors.New("cinit: this process already forwards its signals to a sandbox")

// InstallForwarding replaces the Go runtime's handlers of sigs (distinct,
// catchable) with ones that send each signal on to the target that
// AttachForwarding names, and record it until then. There is one
// forwarding per process.
func InstallForwarding(sigs []syscall.Signal) error {
	if len(sigs) == 0 {
		return errors.New("cinit: no signals to forward")
	}
	cs := make([]C.int, len(sigs))
	for i, s := range sigs {
		cs[i] = C.int(s)
	}
	switch r := C.ar_sigfwd_install(&cs[0], C.int(len(cs))); {
	case r == -C.int(unix.EBUSY):
		return ErrForwarding
	case r < 0:
		return fmt.Errorf("cinit: forward signals %v: %w", sigs, unix.Errno(-r))
	}
	return nil
}

// AttachForwarding sends the recorded signals, and those that come later,
// to pidfd (to pid when pidfd is -1).
func AttachForwarding(pidfd, pid int) { C.ar_sigfwd_attach(C.int(pidfd), C.int(pid)) }

// DetachForwarding drops the target: later signals are swallowed. Once it
// returns no handler uses the pidfd or pid given to AttachForwarding.
func DetachForwarding() { _ = C.ar_sigfwd_detach() }

// UninstallForwarding puts the Go runtime's handlers back.
func UninstallForwarding() { _ = C.ar_sigfwd_uninstall() }

// validate checks the plan (but for its command, which an image leaves
// out) and returns every string it holds.
func (p *Plan) validate() ([]string, error) {
	switch {
	case len(p.FDs) < 4 || p.SyncFD < 3 || p.SyncFD >= len(p.FDs):
		return nil, errors.New("cinit: fds must hold stdio and the sync socket")
	case len(p.TaskFDs) > 64:
		return nil, errors.New("cinit: more than 64 cgroup tasks files")
	case len(p.FDs) > MaxEntries || len(p.Mounts) > MaxEntries || len(p.Devices) > MaxEntries:
		return nil, fmt.Errorf("cinit: more than %d fds, mounts or devices", MaxEntries)
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
			return nil, fmt.Errorf("cinit: %q contains a NUL byte", s)
		}
	}
	return strs, nil
}

// builder lays the plan out as C structs in an anonymous mapping of its
// own, outside the Go heap. The child is a copy of this process and reads
// the same bytes; being a separate mapping lets it drop its copy of
// everything else the moment it starts (shed_parent in cinit.c), so the
// Go parent's writes during the setup do not turn into copy-on-write
// faults (each with a TLB-shootdown IPI across the parent's threads).
type builder struct {
	mem  []byte
	off  uintptr
	full bool // an alloc did not fit: the plan is incomplete
}

func newBuilder(p *Plan, strs []string, extra int) (*builder, error) {
	// An upper bound: every string with its NUL and alignment, every array
	// with a NULL slot and alignment, and the structs.
	size := 4096 + extra + int(unsafe.Sizeof(C.struct_ar_plan{}))
	for _, s := range strs {
		size += len(s) + 16
	}
	ptr := int(unsafe.Sizeof(uintptr(0)))
	size += (len(p.Argv) + len(p.Env) + len(p.Masked) + len(p.Readonly) + 8) * (ptr + 8)
	size += (len(p.FDs) + len(p.TaskFDs) + 4) * 8
	size += len(p.Mounts) * (int(unsafe.Sizeof(C.struct_ar_mount{})) + 16)
	for _, m := range p.Mounts {
		size += len(m.Params) * (int(unsafe.Sizeof(C.struct_ar_fsparam{})) + 16)
	}
	size += len(p.Devices) * (int(unsafe.Sizeof(C.struct_ar_device{})) + 16)
	size += len(p.Rlimits) * (int(unsafe.Sizeof(C.struct_ar_rlimit{})) + 16)
	pg := unix.Getpagesize()
	size = (size + pg - 1) / pg * pg
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("cinit: plan memory: %w", err)
	}
	return &builder{mem: mem}, nil
}

func (b *builder) free() { _ = unix.Munmap(b.mem) }

// errArena means newBuilder's bound was wrong: a bug, reported rather
// than written past.
var errArena = errors.New("cinit: plan memory exhausted")

// alloc returns n zeroed Ts in the arena, or nil when it is full.
func alloc[T any](b *builder, n int) []T {
	if n == 0 {
		return nil
	}
	var zero T
	align, size := unsafe.Alignof(zero), unsafe.Sizeof(zero)
	off := (b.off + align - 1) &^ (align - 1)
	end := off + size*uintptr(n)
	if end > uintptr(len(b.mem)) {
		b.full = true
		return nil
	}
	b.off = end
	return unsafe.Slice((*T)(unsafe.Pointer(&b.mem[off])), n)
}

func (b *builder) str(s string) *C.char {
	buf := alloc[byte](b, len(s)+1)
	if buf == nil {
		return nil
	}
	copy(buf, s)
	return (*C.char)(unsafe.Pointer(&buf[0]))
}

// strs returns a NULL-terminated array.
func (b *builder) strs(ss []string) **C.char {
	arr := alloc[*C.char](b, len(ss)+1)
	if arr == nil {
		return nil
	}
	for i, s := range ss {
		arr[i] = b.str(s)
	}
	return &arr[0]
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

func (b *builder) plan(p *Plan) (*C.struct_ar_plan, error) {
	cps := alloc[C.struct_ar_plan](b, 1)
	if cps == nil {
		return nil, errArena
	}
	cp := &cps[0]
	*cp = C.struct_ar_plan{
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
		envp:             b.strs(p.Env),
		path:             b.str(p.Path),
		no_new_privs:     cbool(p.NoNewPrivs),
		keep_caps:        [2]C.uint32_t{C.uint32_t(p.KeepCaps), C.uint32_t(p.KeepCaps >> 32)},
	}
	if p.Serve {
		cp.serve = 1
	}
	if len(p.Argv) > 0 {
		cp.argv = b.strs(p.Argv)
	}
	if tf := alloc[C.int](b, len(p.TaskFDs)); tf != nil {
		for i, fd := range p.TaskFDs {
			tf[i] = C.int(fd)
		}
		cp.task_fds, cp.ntask_fds = &tf[0], C.int(len(tf))
	}
	if fds := alloc[C.int](b, len(p.FDs)); fds != nil {
		for i, fd := range p.FDs {
			fds[i] = C.int(fd)
		}
		cp.fds = &fds[0]
	}
	if p.Hostname != "" {
		cp.hostname = b.str(p.Hostname)
	}
	if ms := alloc[C.struct_ar_mount](b, len(p.Mounts)); ms != nil {
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
			if ps := alloc[C.struct_ar_fsparam](b, len(m.Params)); ps != nil {
				for j, fp := range m.Params {
					ps[j].key = b.str(fp.Key)
					if !fp.Flag {
						ps[j].value = b.str(fp.Value)
					}
				}
				ms[i].params = &ps[0]
			}
		}
		cp.mounts, cp.nmounts = &ms[0], C.int(len(ms))
	}
	if ds := alloc[C.struct_ar_device](b, len(p.Devices)); ds != nil {
		for i, d := range p.Devices {
			ds[i] = C.struct_ar_device{path: b.str(d.Path), dest: b.str(d.Dest)}
		}
		cp.devices, cp.ndevices = &ds[0], C.int(len(ds))
	}
	if len(p.Masked) > 0 {
		cp.masked, cp.nmasked = b.strs(p.Masked), C.int(len(p.Masked))
	}
	if len(p.Readonly) > 0 {
		cp.readonly, cp.nreadonly = b.strs(p.Readonly), C.int(len(p.Readonly))
	}
	if rs := alloc[C.struct_ar_rlimit](b, len(p.Rlimits)); rs != nil {
		for i, r := range p.Rlimits {
			rs[i] = C.struct_ar_rlimit{name: b.str(r.Name), resource: C.int(r.Resource), soft: C.uint64_t(r.Soft), hard: C.uint64_t(r.Hard)}
		}
		cp.rlimits, cp.nrlimits = &rs[0], C.int(len(rs))
	}
	if b.full {
		return nil, errArena
	}
	return cp, nil
}

// initialArgsAgree reports whether the constructor's argument lookup for
// musl builds (initial_args in cinit.c) finds the arguments glibc passed
// this process's constructor.
func initialArgsAgree() bool { return C.ar_initial_args_agree() == 1 }

// filterAllows reports whether the loader's check (filter_allows in
// cinit.c) finds that filter allows system call nr with the arguments args
// whose bits are set in known, whatever the others are.
func filterAllows(filter []byte, nr uint32, known uint, args [6]uint64) bool {
	return C.ar_filter_allows(unsafe.Pointer(&filter[0]), C.size_t(len(filter)/8), C.uint32_t(nr), C.unsigned(known),
		(*C.uint64_t)(unsafe.Pointer(&args[0]))) == 1
}

// handoverAllowed reports whether the loader would load filter itself and
// hand it over (handover_allowed in cinit.c), the handover's seccomp call
// carrying flags.
func handoverAllowed(filter []byte, flags uint) bool {
	return C.ar_handover_allowed(unsafe.Pointer(&filter[0]), C.size_t(len(filter)/8), C.unsigned(flags)) == 1
}

// Request types and flags of a serving init (cinit.h's AR_REQ_*, AR_*).
const (
	ReqExec      = C.AR_REQ_EXEC
	ReqSignal    = C.AR_REQ_SIGNAL
	ReqSignalAll = C.AR_REQ_SIGNAL_ALL

	ExecFD0  = C.AR_EXEC_FD0
	ExecFD1  = C.AR_EXEC_FD1
	ExecFD2  = C.AR_EXEC_FD2
	ExecTTY  = C.AR_EXEC_TTY
	SigGroup = C.AR_SIG_GROUP

	// ReqMax bounds a request's size; ReqMaxStrings its argv and env.
	ReqMax        = C.AR_REQ_MAX
	ReqMaxStrings = C.AR_REQ_MAX_STRINGS
	reqMagic      = C.AR_REQ_MAGIC
	reqHeaderSize = C.sizeof_struct_ar_req
)

// ErrRequestTooLong is returned by EncodeExec for a request the init
// would not take (over ReqMax bytes or ReqMaxStrings strings).
var ErrRequestTooLong = fmt.Errorf("cinit: exec request over %d bytes or %d strings: %w", C.AR_REQ_MAX, C.AR_REQ_MAX_STRINGS, unix.E2BIG)

// Request is one request to a serving init.
type Request struct {
	Type   uint32
	ID     uint64 // echoed in the reply
	Target uint64 // ReqSignal: the ID of the exec to signal
	Flags  uint32 // ExecFD* or ExecTTY, SigGroup
	Sig    int32
	// Winsize is an ExecTTY exec's terminal size: rows | columns << 16.
	Winsize uint32
	// Exec only: Cwd "" keeps the init's; Path is the PATH Argv[0] is
	// looked up in.
	Cwd, Path string
	Argv, Env []string
}

// Encode lays the request out as cinit.h's struct ar_req and its strings.
func (r *Request) Encode() ([]byte, error) {
	strs := append([]string{r.Cwd, r.Path}, r.Argv...)
	strs = append(strs, r.Env...)
	n := 0
	for _, s := range strs {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("cinit: %q contains a NUL byte", s)
		}
		n += len(s) + 1
	}
	if r.Type != ReqExec {
		strs, n = nil, 0
	}
	if reqHeaderSize+n > ReqMax || len(r.Argv)+len(r.Env) > ReqMaxStrings {
		return nil, ErrRequestTooLong
	}
	b := make([]byte, reqHeaderSize, reqHeaderSize+n)
	ne := binary.NativeEndian
	argc, envc := len(r.Argv), len(r.Env)
	if r.Type != ReqExec {
		argc, envc = 0, 0
	}
	ne.PutUint32(b[0:], reqMagic)
	ne.PutUint32(b[4:], r.Type)
	ne.PutUint64(b[8:], r.ID)
	ne.PutUint64(b[16:], r.Target)
	ne.PutUint32(b[24:], r.Flags)
	ne.PutUint32(b[28:], uint32(r.Sig))
	ne.PutUint32(b[32:], uint32(argc))
	ne.PutUint32(b[36:], uint32(envc))
	ne.PutUint32(b[40:], uint32(n))
	ne.PutUint32(b[44:], r.Winsize)
	for _, s := range strs {
		b = append(b, s...)
		b = append(b, 0)
	}
	return b, nil
}

// ServeCheck says whether a serving init can work under filter (struct
// sock_filter[]): denied names the first system call it needs that the
// filter does not allow ("" when it allows them all), and pidfd whether
// it allows exec'd children to be forked with CLONE_PIDFD.
func ServeCheck(filter []byte) (denied string, pidfd bool) {
	if len(filter) == 0 {
		return "", true
	}
	var pf C.int
	i := C.ar_serve_denied(unsafe.Pointer(&filter[0]), C.size_t(len(filter)/8), C.int(3), &pf)
	if i >= 0 {
		return C.GoString(C.ar_serve_call(i)), false
	}
	return "", pf == 1
}

// ServeTTYCheck names the first call of an exec on a terminal that filter
// does not allow, "" when it allows them all.
func ServeTTYCheck(filter []byte) string {
	if len(filter) == 0 {
		return ""
	}
	if c := C.ar_serve_tty_denied(unsafe.Pointer(&filter[0]), C.size_t(len(filter)/8)); c != nil {
		return C.GoString(c)
	}
	return ""
}

// parsedRequest is what ar_parse_req read, for tests.
type parsedRequest struct {
	Request
	Errno unix.Errno
	Why   string
}

// parseRequest runs the init's request parser (ar_parse_req in cinit.c)
// on b, received with nfds descriptors.
func parseRequest(b []byte, nfds int) parsedRequest {
	cb := C.CBytes(b) // the parser may not see Go memory move
	defer C.free(cb)
	slots := (*[C.AR_REQ_MAX_STRINGS + 2]*C.char)(C.malloc(C.size_t(unsafe.Sizeof(uintptr(0))) * (C.AR_REQ_MAX_STRINGS + 2)))
	defer C.free(unsafe.Pointer(slots))
	var r C.struct_ar_parsed_req
	var why *C.char
	e := C.ar_parse_req(cb, C.size_t(len(b)), C.int(nfds), &r, &slots[0], C.AR_REQ_MAX_STRINGS+2, &why)
	out := parsedRequest{Request: Request{Type: uint32(r._type), ID: uint64(r.id), Target: uint64(r.target),
		Flags: uint32(r.flags), Sig: int32(r.sig)}}
	if e < 0 {
		out.Errno, out.Why = unix.Errno(-e), C.GoString(why)
		return out
	}
	if r._type == C.AR_REQ_EXEC {
		out.Cwd, out.Path = C.GoString(r.cwd), C.GoString(r.path)
		out.Argv, out.Env = goStrings(r.argv), goStrings(r.envp)
	}
	return out
}

// goStrings copies a NULL-terminated C string array.
func goStrings(p **C.char) []string {
	var out []string
	for ; *p != nil; p = (**C.char)(unsafe.Add(unsafe.Pointer(p), unsafe.Sizeof(p))) {
		out = append(out, C.GoString(*p))
	}
	return out
}
