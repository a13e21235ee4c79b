//go:build linux && cgo

package nsinit

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/internal/statedir"
	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/nsinit/internal/cinit"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// What became of a prestart (nsinit/prestart), as Process.Prestart reports it.
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

// maxImages bounds the cached images per user; beyond it the directory
// is emptied before the next one is written.
const maxImages = 256

// errNotAdoptable says the init cannot be placed in this spawn's cgroup at
// its release (only v1 "tasks" files can be passed along).
var errNotAdoptable = errors.New("nsinit: prestart cannot join this cgroup")

// DiscardPrestart kills an init the CLI's constructor started that no spawn
// took, e.g. because the command line was refused before the spawn. Its
// parent death signal would end it at exit anyway; this ends it now.
func DiscardPrestart() {
	if pre := cinit.TakePrestart(); pre.State == cinit.PrestartStarted {
		killPrestart(pre)
	}
}

// killPrestart kills an early init that is not to be adopted. It is
// reaped off the spawn's path: its namespaces are torn down in its exit,
// before it can be reaped (about a millisecond of mounts here), and the
// spawn has no use for it after.
func killPrestart(pre cinit.Prestart) {
	_ = unix.Kill(pre.Pid, unix.SIGKILL)
	_ = unix.Close(pre.Sock)
	go func() {
		for {
			if _, err := unix.Wait4(pre.Pid, nil, 0, nil); !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
}

// prestartImage is the image of the plan startC would run for spec, with
// the placeholders cinit.h describes: what the constructor must have read
// for its init to be this spawn's.
func prestartImage(cfg *Config, spec *specs.Spec, pre cinit.Prestart) ([]byte, error) {
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
	return cinit.Image(plan, preps, ids, pre.Key, pre.Exe)
}

// prestarted is what takePrestart settled.
type prestarted struct {
	// p is the adopted init (done), or the error adopting it (done).
	p    *Process
	err  error
	done bool
	// image is what to cache at path once the spawn shows that its init
	// can be adopted next time (nil: nothing).
	path  string
	image []byte
	// outcome is for Process.Prestart.
	outcome string
}

// takePrestart settles the constructor's work for this spawn.
func takePrestart(cfg *Config, spec *specs.Spec, awaitProg func() (*seccomp.Program, error)) prestarted {
	pre := cinit.TakePrestart()
	if pre.State == cinit.PrestartOff {
		return prestarted{}
	}
	img, ierr := prestartImage(cfg, spec, pre)
	if !slices.Equal(pre.Argv, spec.Process.Args) {
		// The command line's first "--" was a flag's value or part of
		// the command: an image for this key would never be adopted.
		ierr = errors.New("nsinit: prestart split the command line elsewhere")
	}
	r := prestarted{outcome: PrestartMiss, path: pre.Path}
	if pre.State == cinit.PrestartStarted {
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
			killPrestart(pre)
		}
		r.outcome = PrestartMismatch
	}
	if ierr != nil {
		// Not for the cache: stop starting inits that cannot be adopted.
		_ = os.Remove(pre.Path)
		_ = os.Remove(pre.Path + expressSuffix)
		return r
	}
	r.image = img
	return r
}

// adoptPrestart takes over the init the constructor started: it waits,
// past its root (short of mount points inside host binds until it got
// 'v'), for the release, which here also carries the v1 cgroup "tasks"
// files it joins first (await_release in cinit.c).
func adoptPrestart(cfg *Config, pre cinit.Prestart, awaitProg func() (*seccomp.Program, error)) (*Process, error) {
	cg, err := cfg.placement()
	if err != nil {
		killPrestart(pre)
		_, _ = awaitProg()
		return nil, err
	}
	if cg != nil && len(cg.Tasks) == 0 {
		killPrestart(pre)
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
		if p.pending == nil && cfg.Express != nil {
			// A spawn that no longer qualifies (a warning, say) must not
			// leave the record of one that did.
			switch x := cfg.Express(); {
			case x == nil || pre.NoExpress:
				_ = os.Remove(pre.Path + expressSuffix)
			case !pre.ExpressHeld:
				cacheExpress(pre, release, x)
			}
		}
		return nil
	}
	return p, nil
}

// expressSuffix names the express record next to its plan image.
const expressSuffix = ".express"

// expressRecord is the text express.c reads: the image it belongs to, the
// signals, the cgroup recipe, the release message and the fingerprints,
// one per line, fields separated by tabs. Nil when a value cannot be
// written that way.
func expressRecord(imageSum uint64, release []byte, x *Express) []byte {
	if len(x.Signals) == 0 || !filepath.IsAbs(x.StateDir) {
		return nil
	}
	if x.NoCgroup {
		if x.PidsMax != 0 || x.CgroupDir != "" || x.CgroupParent != "" {
			return nil
		}
	} else if x.PidsMax <= 0 || !filepath.IsAbs(x.CgroupDir) || x.CgroupParent == "" || strings.Contains(x.CgroupParent, "/") {
		return nil
	}
	for _, f := range []string{x.StateDir, x.CgroupParent, x.CgroupDir} {
		if strings.ContainsAny(f, "\t\n\x00") {
			return nil
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agentrun-express 1\nimage %016x\nsignals", imageSum)
	for _, s := range x.Signals {
		fmt.Fprintf(&b, " %d", s)
	}
	if x.NoCgroup {
		fmt.Fprintf(&b, "\nno-cgroup\t%s", x.StateDir)
	} else {
		fmt.Fprintf(&b, "\ncgroup\t%s\t%s\t%s\t%d", x.StateDir, x.CgroupParent, x.CgroupDir, x.PidsMax)
	}
	fmt.Fprintf(&b, "\nrelease %s\n", hex.EncodeToString(release))
	for _, f := range x.Fingerprints {
		if strings.ContainsAny(f, "\n\x00") {
			return nil
		}
		b.WriteString(f)
		b.WriteByte('\n')
	}
	b.WriteString("end\n")
	return []byte(b.String())
}

// cacheExpress stores the express record of the image pre was started
// from. Best effort, like cacheImage.
func cacheExpress(pre cinit.Prestart, release []byte, x *Express) {
	if len(pre.Image) < 24 {
		return
	}
	rec := expressRecord(binary.NativeEndian.Uint64(pre.Image[16:24]), release, x)
	if rec == nil {
		return
	}
	writeCached(pre.Path+expressSuffix, rec)
}

// cacheImage stores img where the constructor of the next spawn with the
// same key looks for it. Best effort: a failure only costs the next spawn
// its head start.
func cacheImage(path string, img []byte) {
	dir := filepath.Dir(path)
	euid := os.Geteuid()
	if err := statedir.Ensure(dir, euid); err != nil {
		return
	}
	if ents, err := os.ReadDir(dir); err == nil && countImages(ents) >= maxImages {
		for _, e := range ents {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	writeCached(path, img)
}

// countImages counts the plan images among a cache directory's entries
// (not their express records).
func countImages(ents []os.DirEntry) int {
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), expressSuffix) {
			n++
		}
	}
	return n
}

// writeCached replaces path (in the private cache directory) with data.
func writeCached(path string, data []byte) {
	f, err := os.CreateTemp(filepath.Dir(path), ".image-")
	if err != nil {
		return
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil && cerr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(f.Name())
	}
}
