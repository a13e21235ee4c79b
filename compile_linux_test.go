//go:build linux

package agentrun

import (
	"syscall"
	"testing"
)

// TestCompileRefusesStateByIdentity: the state reached by another path (a
// bind mount of it, or of a directory above it, elsewhere on the host) is
// refused as the state is, by device and inode.
func TestCompileRefusesStateByIdentity(t *testing.T) {
	f := newFakeFS()
	for _, d := range []string{"/", "/run", "/run/agentrun", "/mnt", "/mnt/alias", "/mnt/alias/sub", "/mnt/runalias", "/srv", "/srv/x"} {
		f.dirs[d] = true
	}
	ids := map[string]FileID{
		"/": {1, 2}, "/run": {1, 5}, "/run/agentrun": {1, 10}, "/mnt": {1, 20},
		"/mnt/alias": {1, 10}, "/mnt/alias/sub": {1, 11}, "/mnt/runalias": {1, 5}, "/srv": {1, 30}, "/srv/x": {1, 31},
	}
	f.sysOf = func(p string) any {
		if id, ok := ids[p]; ok {
			return &syscall.Stat_t{Dev: id.Dev, Ino: id.Ino}
		}
		return nil
	}
	for _, c := range []struct {
		name      string
		workspace string
		mounts    []Mount
		refused   bool
	}{
		{"workspace is the state under another path", "/mnt/alias", nil, true},
		{"ro bind lies in it under another path", "/srv/x", []Mount{{Source: "/mnt/alias/sub", Dest: "/r", Mode: MountRO}}, true},
		{"rw bind holds it under another path", "/srv/x", []Mount{{Source: "/mnt/runalias", Dest: "/r", Mode: MountRW}}, true},
		{"elsewhere, below the same /", "/srv/x", []Mount{{Source: "/mnt", Dest: "/r", Mode: MountRW}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := f.host(1000)
			h.Workspace, h.StateRoots = c.workspace, []string{"/run/agentrun"}
			h.StateIDs = map[FileID]string{{1, 10}: "/run/agentrun"}
			h.StateChain = map[FileID]string{{1, 10}: "/run/agentrun", {1, 5}: "/run/agentrun", {1, 2}: "/run/agentrun"}
			wantStateRefusal(t, h, c.mounts, c.refused)
		})
	}
}
