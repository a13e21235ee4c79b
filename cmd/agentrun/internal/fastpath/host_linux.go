//go:build linux && cgo

package fastpath

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agentrun/agentrun/cgroups"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// hostRecorder does the host reads of NewHostInfo and Compile and writes
// down each answer as a fingerprint (Express): the express path
// may only run a cached plan while every one of them still gives the same
// answer. Compile's output depends on nothing else of the host: the type,
// mode, owner and size (regular files) of what it lstats, the targets it
// reads or resolves, and files it reads, which the express path cannot
// re-check and so rule it out.
type hostRecorder struct {
	reads []hostRead
	// unsupported is set by a read without a fingerprint (a file's
	// content, a failed readlink, a name with a tab or a newline).
	unsupported bool
}

// hostRead is one fingerprint, formatted only when a record is written
// (lines): most spawns write none.
type hostRead struct {
	kind, path, rest string
	st               *syscall.Stat_t // kind "L" when lstat succeeded
}

func (r *hostRecorder) add(h hostRead) {
	if strings.ContainsAny(h.path, "\t\n\x00") || strings.ContainsAny(h.rest, "\n\x00") {
		r.unsupported = true
		return
	}
	r.reads = append(r.reads, h)
}

// lines formats the fingerprints as Express has them, each once:
// Compile looks at some paths more than once (the workspace, its
// directories), and every line costs the express path a system call.
func (r *hostRecorder) lines() []string {
	out := make([]string, 0, len(r.reads)+2)
	seen := make(map[string]bool, len(r.reads))
	for _, h := range r.reads {
		rest := h.rest
		if st := h.st; st != nil {
			size := int64(0)
			if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
				size = st.Size
			}
			rest = fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d", st.Mode, st.Uid, st.Gid, size, st.Dev, st.Ino)
			if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
				// A regular file's change time too: a root template holds
				// copies of its content (mounts/template_linux.go), and
				// any write moves it, which nobody can set back.
				rest += fmt.Sprintf("\t%d", st.Ctim.Nano())
			}
		}
		line := h.kind + "\t" + h.path + "\t" + rest
		if !seen[line] {
			seen[line] = true
			out = append(out, line)
		}
	}
	return slices.DeleteFunc(out, r.impliedResolve)
}

// impliedResolve reports whether line is an "E" fingerprint that the "L"
// fingerprints of every component of its path already imply.
// realpath(path) == path holds when each component exists and is no
// symlink, which their L lines check (type and inode) in the same pass;
// the E line would only repeat it, at a readlink per component.
func (r *hostRecorder) impliedResolve(line string) bool {
	f := strings.Split(line, "\t")
	if len(f) != 3 || f[0] != "E" || f[1] != f[2] || f[1] != filepath.Clean(f[1]) || !filepath.IsAbs(f[1]) || f[1] == "/" {
		return false
	}
	for p := f[1]; p != "/"; p = filepath.Dir(p) {
		if !r.noSymlink(p) {
			return false
		}
	}
	return true
}

// noSymlink reports whether the fingerprints hold an L line for path
// that is not a symlink (and so exists).
func (r *hostRecorder) noSymlink(path string) bool {
	for _, h := range r.reads {
		if h.kind == "L" && h.path == path && h.st != nil && h.st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			return true
		}
	}
	return false
}

func (r *hostRecorder) lstat(path string) (fs.FileInfo, error) {
	fi, err := os.Lstat(path)
	st, ok := sysStat(fi)
	switch {
	case err != nil:
		r.add(hostRead{kind: "L", path: path, rest: "-"})
	case !ok:
		r.unsupported = true
	default:
		r.add(hostRead{kind: "L", path: path, st: st})
	}
	return fi, err
}

func sysStat(fi fs.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

func (r *hostRecorder) readlink(path string) (string, error) {
	t, err := os.Readlink(path)
	if err != nil || strings.ContainsAny(t, "\t") {
		r.unsupported = true
	} else {
		r.add(hostRead{kind: "R", path: path, rest: t})
	}
	return t, err
}

func (r *hostRecorder) resolve(path string) (string, error) {
	t, err := filepath.EvalSymlinks(path)
	switch {
	case err != nil:
		r.add(hostRead{kind: "E", path: path, rest: "-"})
	case !filepath.IsAbs(t):
		// Only absolute answers compare with realpath(3).
		r.unsupported = true
	default:
		r.add(hostRead{kind: "E", path: path, rest: t})
	}
	return t, err
}

func (r *hostRecorder) owner(path string) (int, int, error) {
	fi, err := r.lstat(path)
	if err != nil {
		return 0, 0, err
	}
	st, _ := sysStat(fi)
	return int(st.Uid), int(st.Gid), nil
}

func (r *hostRecorder) readFile(path string) ([]byte, error) {
	r.unsupported = true
	return os.ReadFile(path)
}

// expressFor returns the express record's inputs for a spawn the CLI
// found eligible (Config.Eligible) that was built from b, or nil when the
// express path could not give the same outcome.
//
// The sandbox has either one v1 cgroup, in the pids hierarchy alone, with
// a pids limit only, or none, for the reason b.Undelegated gives.
func expressFor(rec *hostRecorder, sigs []syscall.Signal, b lifecycle.Built) *Express {
	spec := b.Spec
	if rec == nil || rec.unsupported || b.Warned || b.TemplateSkipped || len(sigs) == 0 ||
		spec == nil || !nsinit.HasNamespace(spec, specs.PIDNamespace) {
		return nil
	}
	if b.TemplateDir != "" {
		// The express path opens the template by its path: a template
		// swept and built again there is another directory.
		if _, err := rec.lstat(b.TemplateDir); err != nil {
			return nil
		}
	}
	cg := b.Cgroup
	if cg == nil {
		return expressUndelegated(spec, sigs, rec, b.Undelegated)
	}
	if cg.V2() || len(cg.Paths()) != 1 || !slices.Equal(cg.Controllers(0), []string{cgroups.Pids}) || cg.Record() == "" {
		return nil
	}
	pids := int64(cgroups.DefaultPidsLimit)
	if r := spec.Linux.Resources; r != nil {
		if r.Memory != nil || r.CPU != nil || r.BlockIO != nil || r.HugepageLimits != nil || len(r.Devices) > 0 ||
			r.Network != nil || len(r.Rdma) > 0 || len(r.Unified) > 0 {
			return nil
		}
		if r.Pids != nil {
			if r.Pids.Limit == nil {
				return nil
			}
			pids = *r.Pids.Limit
		}
	}
	hash := cg.CallerHash()
	if hash == "" {
		return nil
	}
	x := &Express{
		StateDir:  filepath.Dir(cg.Record()),
		CgroupDir: filepath.Dir(cg.Paths()[0]),
		PidsMax:   pids,
	}
	x.CgroupParent = filepath.Base(x.CgroupDir)
	// The directory the sandbox's parent cgroup is made in: a remount
	// changes it.
	if _, err := rec.lstat(filepath.Dir(x.CgroupDir)); err != nil || rec.unsupported {
		return nil
	}
	x.Fingerprints = append(rec.lines(), "C\t"+hash)
	return withSignals(x, sigs)
}

// expressUndelegated is expressFor for a sandbox without a cgroup. Go
// gives it none only because it could not make one, so the record holds
// what made it so: the caller's cgroups ("C"), the pids hierarchy's mount
// point and the caller's directory in it ("L"), and that directory's
// writability ("A"). "C" is the read the cgroups Manager decided on: a
// caller that moves meanwhile must not pair its new cgroups with the old
// one's paths. Should any of them change, Go may now make a cgroup
// with the default pids limit, and the express path stands aside.
func expressUndelegated(spec *specs.Spec, sigs []syscall.Signal, rec *hostRecorder, und *cgroups.Undelegated) *Express {
	if und == nil || spec.Linux == nil || spec.Linux.Resources != nil || !filepath.IsAbs(und.StateDir) ||
		strings.ContainsAny(und.Caller, "\t\n\x00") {
		return nil
	}
	hash := und.CallerHash
	if hash == "" {
		return nil
	}
	for _, p := range []string{und.Mount, und.Caller} {
		if _, err := rec.lstat(p); err != nil || rec.unsupported {
			return nil
		}
	}
	x := &Express{NoCgroup: true, StateDir: und.StateDir}
	x.Fingerprints = append(rec.lines(), "C\t"+hash, fmt.Sprintf("A\t%s\t%d", und.Caller, int(und.Access)))
	return withSignals(x, sigs)
}

func withSignals(x *Express, sigs []syscall.Signal) *Express {
	for _, s := range sigs {
		x.Signals = append(x.Signals, int(s))
	}
	return x
}
