//go:build linux && cgo

package nsinit

import (
	"bytes"
	"errors"
	"os"
	"slices"

	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/nsinit/internal/cinit"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// What became of a prestart (Config.Prestart), as Process.Prestart reports it.
const (
	// PrestartHit means the init started before the Go runtime was adopted.
	PrestartHit = "hit"
	// PrestartMiss means there was no image for these flags yet; one is cached
	// for the next spawn.
	PrestartMiss = "miss"
	// PrestartMismatch means an init was started from an image that is not this
	// spawn's plan (the environment or the host changed); it was killed and
	// the sandbox spawned afresh.
	PrestartMismatch = "mismatch"
)

// errNotAdoptable says the init cannot be placed in this spawn's cgroup at
// its release (only v1 "tasks" files can be passed along).
var errNotAdoptable = errors.New("nsinit: prestart cannot join this cgroup")

// prestartImage is the image of the plan startC would run for spec, with
// the placeholders cinit.h describes: what the constructor must have read
// for its init to be this spawn's.
func prestartImage(cfg *Config, spec *specs.Spec, pre Prestarted) ([]byte, error) {
	for i, s := range []any{cfg.Stdin, cfg.Stdout, cfg.Stderr} {
		if f, ok := s.(*os.File); !ok || f == nil || f.Fd() != uintptr(i) {
			return nil, errors.New("nsinit: prestart needs the process's own stdio")
		}
	}
	// The trees prepareMountsWith would make, numbered as it numbers them.
	prep := &preparedMounts{childFDs: map[int]int{}}
	var preps []cinit.Prep
	ti, templated := mounts.RootTemplate(spec)
	for k, i := range parentPrepared(spec) {
		m := &spec.Mounts[i]
		if templated && i == ti {
			preps = append(preps, cinit.Prep{Source: mounts.TemplateLock(m), FDIndex: syncFD + 1 + k, Template: true})
			prep.childFDs[i] = syncFD + 1 + k
			continue
		}
		if len(m.UIDMappings) == 0 || len(m.GIDMappings) == 0 {
			return nil, errors.New("nsinit: prestart needs both maps of an idmapped mount")
		}
		fd := syncFD + 1 + k
		preps = append(preps, cinit.Prep{
			Source: m.Source, UIDMap: formatIDMap(m.UIDMappings), GIDMap: formatIDMap(m.GIDMappings),
			Attr: mounts.Attrs(m.Options) | unix.MOUNT_ATTR_IDMAP, Recursive: mounts.Recursive(m.Options), FDIndex: fd,
		})
		prep.childFDs[i] = fd
	}
	plan, err := buildPlan(spec, prep, [3]int{0, 1, 2}, -1)
	if err != nil {
		return nil, err
	}
	for range preps {
		plan.FDs = append(plan.FDs, -1)
	}
	if plan.ExpectPPID == os.Getpid() {
		plan.ExpectPPID = cinit.PPIDSelf
	}
	var ids cinit.IDMaps
	if plan.CloneFlags&unix.CLONE_NEWUSER != 0 {
		ids.Setgroups = "allow"
		if os.Geteuid() != 0 {
			ids.Setgroups = "deny"
		}
		if len(spec.Linux.UIDMappings) > 0 {
			ids.UIDMap = formatIDMap(spec.Linux.UIDMappings)
		}
		if len(spec.Linux.GIDMappings) > 0 {
			ids.GIDMap = formatIDMap(spec.Linux.GIDMappings)
		}
	}
	return cinit.Image(plan, preps, ids, pre.Key, cinit.Exe(pre.Exe))
}

// prestarted is what takePrestart settled.
type prestarted struct {
	// p is the adopted init (done), or the error adopting it (done).
	p    *Process
	err  error
	done bool
	// image is what to cache once the spawn shows that its init can be
	// adopted next time (nil: nothing).
	image []byte
	// outcome is for Process.Prestart.
	outcome string
}

// takePrestart settles the program's prestart for this spawn.
func takePrestart(cfg *Config, spec *specs.Spec, awaitProg func() (*seccomp.Program, error)) prestarted {
	if cfg.Prestart == nil {
		return prestarted{}
	}
	pre, ok := cfg.Prestart.Take()
	if !ok {
		return prestarted{}
	}
	img, ierr := prestartImage(cfg, spec, pre)
	if !slices.Equal(pre.Argv, spec.Process.Args) {
		// The command line's first "--" was a flag's value or part of
		// the command: an image for this key would never be adopted.
		ierr = errors.New("nsinit: prestart split the command line elsewhere")
	}
	r := prestarted{outcome: PrestartMiss}
	if pre.Started {
		if ierr == nil && bytes.Equal(img, pre.Image) {
			// The plan is this spawn's: the init may now make mount
			// points inside host binds (await_verified in cinit.c). A
			// failed write means it is gone; its report says why.
			_, _ = unix.Write(pre.Sock, []byte{'v'})
			p, err := adoptPrestart(cfg, pre, awaitProg)
			if !errors.Is(err, errNotAdoptable) {
				return prestarted{p: p, err: err, done: true, outcome: PrestartHit}
			}
			ierr = err
		} else {
			pre.Discard()
		}
		r.outcome = PrestartMismatch
	}
	if ierr != nil {
		// Not for the cache: stop starting inits that cannot be adopted.
		cfg.Prestart.Forget()
		return r
	}
	r.image = img
	return r
}

// adoptPrestart takes over the init the constructor started: it waits,
// past its root (short of mount points inside host binds until it got
// 'v'), for the release, which here also carries the v1 cgroup "tasks"
// files it joins first (await_release in cinit.c).
func adoptPrestart(cfg *Config, pre Prestarted, awaitProg func() (*seccomp.Program, error)) (*Process, error) {
	cg, err := cfg.placement()
	if err != nil {
		pre.Discard()
		_, _ = awaitProg()
		return nil, err
	}
	if cg != nil && len(cg.Tasks) == 0 {
		pre.Discard()
		return nil, errNotAdoptable
	}
	p := &Process{pid: pre.Pid, sock: os.NewFile(uintptr(pre.Sock), "sync-parent"), waited: make(chan struct{}), inCgroup: true, prestart: PrestartHit}
	// Its parent death signal follows the main thread, which lives as long
	// as the process: no locked thread has to wait for it.
	p.openPidfd()
	go p.awaitExit(nil)
	prog, err := awaitProg()
	if err != nil {
		p.Kill()
		p.wait()
		return nil, err
	}
	release, err := releaseMsg(prog)
	if err != nil {
		p.Kill()
		p.wait()
		return nil, err
	}
	var oob []byte
	if cg != nil {
		fds := make([]int, len(cg.Tasks))
		for i, f := range cg.Tasks {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	p.setForwarder(cfg.Forwarder)
	p.prog, p.onViolation = prog, cfg.OnViolation
	p.release = func() error {
		werr := unix.Sendmsg(pre.Sock, release, oob, nil, 0)
		if _, err := p.awaitStarted(werr); err != nil {
			return err
		}
		if p.pending == nil {
			cfg.Prestart.Adopted(release)
		}
		return nil
	}
	return p, nil
}
