//go:build linux

package nsinit

import (
	"fmt"
	"os"

	"github.com/agentrun/agentrun/mounts"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// preparedMounts are detached mounts made by the parent for the child.
type preparedMounts struct {
	files    []*os.File
	childFDs map[int]int
}

func (p *preparedMounts) close() {
	for _, f := range p.files {
		f.Close()
	}
}

// prepareMounts creates the idmapped binds of the Spec, with user
// namespaces of the given maps from idmapUserns. Only host root may idmap
// a mount of a filesystem owned by the initial user namespace, so the
// parent builds them as detached trees and the child attaches them. It
// also opens the root template's lock, which the init inherits.
func prepareMounts(spec *specs.Spec, idmapUserns func(uids, gids []specs.LinuxIDMapping) (int, error)) (*preparedMounts, error) {
	p := &preparedMounts{}
	usernsByKey := map[string]int{}
	defer func() {
		for _, fd := range usernsByKey {
			unix.Close(fd)
		}
	}()
	ti, templated := mounts.RootTemplate(spec)
	for _, i := range parentPrepared(spec) {
		m := &spec.Mounts[i]
		if templated && i == ti {
			// The root template's lock, shared: held as long as anyone
			// has the fd, the init included, it keeps sweeps away.
			f, err := mounts.OpenTemplateLock(mounts.TemplateLock(m))
			if err != nil {
				p.close()
				return nil, &StepError{Step: "root template", Msg: err.Error()}
			}
			if p.childFDs == nil {
				p.childFDs = map[int]int{}
			}
			p.files = append(p.files, f)
			p.childFDs[i] = syncFD + len(p.files)
			continue
		}
		key := fmt.Sprint(m.UIDMappings, m.GIDMappings)
		nsfd, ok := usernsByKey[key]
		if !ok {
			var err error
			if nsfd, err = idmapUserns(m.UIDMappings, m.GIDMappings); err != nil {
				p.close()
				return nil, &StepError{Step: "idmap " + m.Destination, Msg: err.Error()}
			}
			usernsByKey[key] = nsfd
		}
		tree, err := mounts.CloneBind(m, nsfd)
		if err != nil {
			p.close()
			return nil, &StepError{Step: "idmap " + m.Destination, Msg: err.Error()}
		}
		if p.childFDs == nil {
			p.childFDs = map[int]int{}
		}
		p.files = append(p.files, os.NewFile(uintptr(tree), "idmap"))
		p.childFDs[i] = syncFD + len(p.files)
	}
	return p, nil
}

// parentPrepared lists the indexes of the Spec's mounts that the parent
// prepares: the root template's lock and the idmapped trees.
// Their fds follow the sync socket in the child in this order: syncFD+1,
// syncFD+2, ...
func parentPrepared(spec *specs.Spec) []int {
	var out []int
	ti, templated := mounts.RootTemplate(spec)
	for i := range spec.Mounts {
		if m := &spec.Mounts[i]; len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 || (templated && i == ti) {
			out = append(out, i)
		}
	}
	return out
}
