//go:build linux

package lifecycle

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentrun/agentrun/cgroups"
	"github.com/agentrun/agentrun/internal/statedir"
	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/nsinit"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// sandboxCgroup creates the sandbox's cgroup. Requested limits that this
// host or caller cannot enforce fail closed. A default pids limit applies
// unless the spec sets one; without requested limits it applies wherever
// cgroups are usable, and the sandbox runs without a cgroup (reported as
// limits "none") where they are not.
//
// limitsOnly: nothing reads the usage, and the kernel ends the sandbox
// through its PID namespace, so a v1 sandbox needs only the hierarchies
// that enforce its limits (cgroups.Options.LimitsOnly).
//
// und, set only with no cgroup, is that outcome's reason when the express
// path can re-check it (cgroups.Undelegated).
func sandboxCgroup(spec *specs.Spec, limitsOnly bool) (cg *cgroups.Cgroup, und *cgroups.Undelegated, err error) {
	var requested *specs.LinuxResources
	if spec.Linux != nil {
		requested = spec.Linux.Resources
	}
	// The holder keeps a rootless caller's transient systemd scope alive
	// (see cgroups/scope_linux.go).
	mgr, err := cgroups.NewManager(cgroups.Options{ScopeHolder: nsinit.HoldCommand, LimitsOnly: limitsOnly})
	if err != nil {
		if requested != nil {
			return nil, nil, err
		}
		return nil, nil, nil
	}
	// Leftovers of runtimes killed with SIGKILL; nothing to do is one ReadDir.
	_, _ = mgr.Sweep()
	// The default pids limit also applies next to the limits a policy sets
	// (--memory alone must not leave fork bombs unbounded). A spec that
	// says something about pids, "unlimited" (0 or -1) included, keeps it.
	res := requested
	if res == nil || res.Pids == nil || res.Pids.Limit == nil {
		var r specs.LinuxResources
		if res != nil {
			r = *res
		}
		limit := int64(cgroups.DefaultPidsLimit)
		r.Pids = &specs.LinuxPids{Limit: &limit}
		res = &r
	}
	// The id only has to be unique (mkdir and the state record refuse a
	// taken one): math/rand's generator, seeded by the runtime, costs no
	// system call, where crypto/rand's first use sets up per-thread state.
	id := fmt.Sprintf("sbx-%d-%016x", os.Getpid(), rand.Uint64())
	cg, err = mgr.Create(id, res)
	var unusable *cgroups.UnusableError
	if err != nil && errors.As(err, &unusable) && res != requested {
		// The default cannot apply here (no usable pids controller):
		// what was requested still must, and nothing else.
		if requested == nil {
			if u, ok := mgr.Undelegated(); ok {
				und = &u
			}
			return nil, und, nil
		}
		cg, err = mgr.Create(id, requested)
		return cg, nil, err
	}
	return cg, nil, err
}

// rootTemplate returns spec with its root bound from a root template
// (mounts/template_linux.go), and the template, held, or spec and nil when
// it gets none; off turns templates off. A template only saves work:
// without one the root is built in a fresh tmpfs, as strong, so the
// reasons not to use one are not errors. skipped says the spec would get
// one but not this time (a file changed a moment ago, a lock someone
// holds): its plan is not the one later spawns will have.
func rootTemplate(spec *specs.Spec, off bool) (_ *specs.Spec, _ *mounts.Template, skipped bool) {
	if v := os.Getenv("AGENTRUN_TEMPLATE"); off || v == "0" || v == "off" ||
		spec.Root != nil || spec.Annotations[mounts.AnnotationRootfs] != "tmpfs" {
		return spec, nil, false
	}
	euid := os.Geteuid()
	root := statedir.Root(euid)
	// Not in the fallback state directory in $TMPDIR: cleaners age files
	// out there, the empty mount points first, and the template would
	// break under sandboxes. /run and $XDG_RUNTIME_DIR have none.
	if euid != 0 && root != filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "agentrun") {
		return spec, nil, false
	}
	// The init opens the template by its path. A rootless init is the
	// caller, and the state directory its own; a root-mode init is an id
	// of the sandbox's range, which may pass through but not list a
	// directory of root's. The locks stay private in either case.
	dir, mode, locks := filepath.Join(root, "templates"), os.FileMode(0o700), filepath.Join(root, "template-locks")
	if euid == 0 {
		dir, mode = root+"-templates", 0o711
	}
	if writesTo(spec, dir) {
		// It would write to every other sandbox's root.
		return spec, nil, false
	}
	// From here on, a spawn goes without its template only for a passing
	// reason (a file changed a moment ago, a lock someone holds). Its
	// plan must not become an express record, which would keep the
	// slower tmpfs root for every later spawn with the same flags.
	passing := func(err error) (*specs.Spec, *mounts.Template, bool) {
		slog.Debug("agentrun: no root template", "reason", err)
		return spec, nil, true
	}
	skel, err := mounts.SkeletonOf(spec, time.Now())
	var nt *mounts.NotTemplatableError
	if errors.As(err, &nt) && !nt.Passing {
		// This spec never gets one: its tmpfs root is the plan.
		slog.Debug("agentrun: no root template", "reason", err)
		return spec, nil, false
	}
	if err != nil {
		return passing(err)
	}
	if err := templateDirs(euid, dir, mode, locks); err != nil {
		return passing(err)
	}
	t, err := mounts.AcquireTemplate(dir, locks, skel)
	if err != nil {
		return passing(err)
	}
	return skel.Spec(spec, t), t, false
}

// templateDirs makes the directories of the templates and their locks.
// Their paths must hold no symlink: the init and start_core open them
// without following any.
func templateDirs(euid int, dir string, mode os.FileMode, locks string) error {
	for _, d := range []string{dir, locks} {
		if err := statedir.Ensure(d, euid); err != nil {
			return err
		}
		if real, err := filepath.EvalSymlinks(d); err != nil || real != d {
			return fmt.Errorf("the path %s holds a symlink", d)
		}
	}
	// Ensure made it 0700; a root-mode init passes through (0711).
	if fi, err := os.Lstat(dir); err != nil || fi.Mode().Perm() == mode {
		return err
	}
	return os.Chmod(dir, mode)
}

// writesTo reports whether a read-write bind of spec holds dir, or lies
// in it.
func writesTo(spec *specs.Spec, dir string) bool {
	for _, m := range spec.Mounts {
		if m.Type == "bind" && !slices.Contains(m.Options, "ro") && (statedir.Within(dir, m.Source) || statedir.Within(m.Source, dir)) {
			return true
		}
	}
	return false
}
