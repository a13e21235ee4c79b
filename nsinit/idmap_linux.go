//go:build linux

package nsinit

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/agentrun/agentrun/mounts"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// holdArg0 is argv[0] of a process that only exists to own a user
// namespace whose fd the parent needs; it blocks until killed.
const holdArg0 = "agentrun-userns-hold"

// Dispatch runs the re-exec'd roles of the binary (sandbox init, userns
// holder) and does not return for them. Call it first thing in main.
func Dispatch() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case InitArg0:
		Init()
	case holdArg0:
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		os.Exit(0)
	}
}

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

// prepareMounts creates the idmapped binds of the Spec. Only host root may
// idmap a mount of a filesystem owned by the initial user namespace, so the
// parent builds them as detached trees and the child attaches them.
func prepareMounts(spec *specs.Spec) (*preparedMounts, error) {
	return prepareMountsWith(spec, idmapUserns)
}

// prepareMountsWith is prepareMounts with the way of obtaining a user
// namespace fd for given maps (an exec'd holder, or the C init's clone).
func prepareMountsWith(spec *specs.Spec, idmapUserns func(uids, gids []specs.LinuxIDMapping) (int, error)) (*preparedMounts, error) {
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

// idmapUserns returns an fd of a user namespace with the given maps, owned
// by a short-lived holder process.
func idmapUserns(uids, gids []specs.LinuxIDMapping) (int, error) {
	conv := func(ms []specs.LinuxIDMapping) []syscall.SysProcIDMap {
		out := make([]syscall.SysProcIDMap, len(ms))
		for i, m := range ms {
			out[i] = syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
		}
		return out
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	defer w.Close()
	cmd := &exec.Cmd{
		Path:  "/proc/self/exe",
		Args:  []string{holdArg0},
		Env:   []string{},
		Stdin: r,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: conv(uids),
			GidMappings: conv(gids),
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	err = cmd.Start()
	r.Close()
	if err != nil {
		return -1, fmt.Errorf("userns holder: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open holder userns: %w", err)
	}
	return fd, nil
}
