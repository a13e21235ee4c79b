package agentrun

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/mounts"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// fakeFS is a host for the compiler: paths map to a mode, links to targets.
type fakeFS struct {
	dirs, files map[string]bool
	links       map[string]string
	contents    map[string][]byte
	sizes       map[string]int64
	modes       map[string]fs.FileMode // files' permissions; 0644 if absent
	sysOf       func(string) any       // what Lstat's Sys gives for a path; nil if unset
}

type fakeInfo struct {
	name string
	mode fs.FileMode
	size int64
	sys  any
}

func (f fakeInfo) Name() string       { return f.name }
func (f fakeInfo) Size() int64        { return f.size }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return f.sys }

// sys is what Lstat's Sys gives for p.
func (f *fakeFS) sys(p string) any {
	if f.sysOf == nil {
		return nil
	}
	return f.sysOf(p)
}

func (f *fakeFS) host(uid int) *HostInfo {
	return &HostInfo{
		UID: uid, GID: uid, Workspace: "/home/u/proj", WorkspaceUID: 1234, WorkspaceGID: 1234,
		Environ: []string{"PATH=/usr/bin:/bin", "AWS_SECRET_ACCESS_KEY=x", "TERM=xterm"},
		Lstat: func(p string) (fs.FileInfo, error) {
			switch {
			case f.dirs[p]:
				return fakeInfo{p, fs.ModeDir | 0o755, 4096, f.sys(p)}, nil
			case f.files[p]:
				mode, ok := f.modes[p]
				if !ok {
					mode = 0o644
				}
				return fakeInfo{p, mode, f.sizes[p], f.sys(p)}, nil
			case f.links[p] != "":
				return fakeInfo{p, fs.ModeSymlink | 0o777, 16, nil}, nil
			}
			return nil, fs.ErrNotExist
		},
		Readlink: func(p string) (string, error) {
			if t, ok := f.links[p]; ok {
				return t, nil
			}
			return "", fs.ErrInvalid
		},
		Resolve: func(p string) (string, error) {
			if t, ok := f.links[p]; ok {
				return t, nil
			}
			return p, nil
		},
		Owner:    func(string) (int, int, error) { return 42, 43, nil },
		ReadFile: f.readFile,
	}
}

func (f *fakeFS) readFile(p string) ([]byte, error) {
	if b, ok := f.contents[p]; ok {
		return b, nil
	}
	return nil, fs.ErrNotExist
}

func newFakeFS() *fakeFS {
	return &fakeFS{
		dirs:  map[string]bool{"/usr": true, "/data": true, "/etc/ssl": true, "/cache": true},
		files: map[string]bool{"/etc/passwd": true, "/etc/hosts": true, "/srv/file": true, "/run/resolv.conf": true, "/etc/mime.types": true},
		sizes: map[string]int64{"/etc/passwd": 1500, "/run/resolv.conf": 40, "/etc/mime.types": copyMaxFile + 1},
		links: map[string]string{"/bin": "usr/bin", "/lib": "usr/lib", "/etc/resolv.conf": "/run/resolv.conf", "/data-link": "/data"},
	}
}

func mountAt(s *specs.Spec, dest string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dest {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestCompileRootless(t *testing.T) {
	p := &Policy{Command: []string{"sh", "-c", "true"}, Env: []string{"FOO=bar"}}
	s, err := Compile(p, newFakeFS().host(1000))
	if err != nil {
		t.Fatal(err)
	}
	if s.Process.User.UID != 1000 || s.Linux.UIDMappings[0] != (specs.LinuxIDMapping{ContainerID: 1000, HostID: 1000, Size: 1}) {
		t.Errorf("rootless must map the caller's uid to itself: user %+v maps %+v", s.Process.User, s.Linux.UIDMappings)
	}
	if !s.Process.NoNewPrivileges || s.Process.Capabilities == nil || len(s.Process.Capabilities.Bounding) != 0 {
		t.Errorf("want no_new_privs and empty capability sets, got %+v", s.Process)
	}
	ws := mountAt(s, "/workspace")
	if ws == nil || ws.Source != "/home/u/proj" || len(ws.UIDMappings) != 0 || !hasOption(ws, "rw") {
		t.Errorf("rootless workspace bind wrong: %+v", ws)
	}
	if m := mountAt(s, "/bin"); m == nil || m.Type != mounts.TypeSymlink || m.Source != "usr/bin" {
		t.Errorf("/bin should reproduce the host symlink, got %+v", m)
	}
	if m := mountAt(s, "/usr"); m == nil || !hasOption(m, "ro") || !hasOption(m, "nosuid") {
		t.Errorf("/usr must be a read-only nosuid bind, got %+v", m)
	}
	if m := mountAt(s, "/etc/resolv.conf"); m == nil || m.Source != "/run/resolv.conf" || m.Type != mounts.TypeCopy {
		t.Errorf("/etc/resolv.conf should be a copy of the link's target, got %+v", m)
	}
	if m := mountAt(s, "/etc/passwd"); m == nil || m.Type != mounts.TypeCopy {
		t.Errorf("a small /etc file should be copied, got %+v", m)
	}
	if m := mountAt(s, "/etc/mime.types"); m == nil || m.Type != "bind" || !hasOption(m, "ro") {
		t.Errorf("an /etc file over the copy limit should be a read-only bind, got %+v", m)
	}
	if m := mountAt(s, "/etc/ssl/certs"); m != nil {
		t.Errorf("absent /etc entries must be skipped, got %+v", m)
	}
	for _, d := range []string{"/proc", "/dev", "/dev/pts", "/tmp", "/var/tmp", "/dev/shm"} {
		if mountAt(s, d) == nil {
			t.Errorf("missing mount %s", d)
		}
	}
	if mountAt(s, "/etc/shadow") != nil || mountAt(s, "/home") != nil || mountAt(s, "/root") != nil {
		t.Error("secret locations must not be bound")
	}
	if !hasNS(s, specs.NetworkNamespace) || !hasNS(s, specs.UserNamespace) || !hasNS(s, specs.PIDNamespace) {
		t.Errorf("default policy needs user, pid and network namespaces: %+v", s.Linux.Namespaces)
	}
	env := strings.Join(s.Process.Env, "\n")
	if strings.Contains(env, "AWS_SECRET") || !strings.Contains(env, "FOO=bar") || !strings.Contains(env, "TERM=xterm") {
		t.Errorf("environment not filtered: %q", env)
	}
	if s.Hostname != "agentrun" || s.Process.Cwd != "/workspace" {
		t.Errorf("hostname %q cwd %q", s.Hostname, s.Process.Cwd)
	}
}

func hasOption(m *specs.Mount, o string) bool {
	for _, x := range m.Options {
		if x == o {
			return true
		}
	}
	return false
}

func hasNS(s *specs.Spec, t specs.LinuxNamespaceType) bool {
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == t {
			return true
		}
	}
	return false
}

func TestCompileRootModeIdmapsUserBinds(t *testing.T) {
	p := &Policy{Command: []string{"true"}, Mounts: []Mount{{Source: "/data", Dest: "/data", Mode: MountRO}}}
	s, err := Compile(p, newFakeFS().host(0))
	if err != nil {
		t.Fatal(err)
	}
	if s.Process.User.UID == 0 || s.Linux.UIDMappings[0].HostID != RootModeHostID {
		t.Fatalf("root mode must not run as host root: user %+v maps %+v", s.Process.User, s.Linux.UIDMappings)
	}
	ws := mountAt(s, "/workspace")
	if ws == nil || len(ws.UIDMappings) != 1 || ws.UIDMappings[0].ContainerID != 1234 || ws.UIDMappings[0].HostID != RootModeHostID {
		t.Errorf("workspace must be idmapped from its owner: %+v", ws)
	}
	d := mountAt(s, "/data")
	if d == nil || d.UIDMappings[0].ContainerID != 42 || !hasOption(d, "ro") {
		t.Errorf("--ro bind must be idmapped from its owner and read-only: %+v", d)
	}
	if m := mountAt(s, "/usr"); len(m.UIDMappings) != 0 {
		t.Errorf("system dirs must not be idmapped: %+v", m)
	}
}

func TestCompileNetworkHost(t *testing.T) {
	s, err := Compile(&Policy{Command: []string{"true"}, Network: NetworkHost}, newFakeFS().host(1000))
	if err != nil {
		t.Fatal(err)
	}
	if hasNS(s, specs.NetworkNamespace) {
		t.Error("--net host must share the host network namespace")
	}
}

func TestCompileLimits(t *testing.T) {
	p := &Policy{Command: []string{"true"}, Limits: Limits{Memory: 64 << 20, Pids: 10, CPUs: 0.5, NoFile: 100, CPUTime: Duration(1500 * time.Millisecond)}}
	s, err := Compile(p, newFakeFS().host(1000))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Linux.Resources
	if r == nil || *r.Memory.Limit != 64<<20 || *r.Memory.Swap != 64<<20 || *r.Pids.Limit != 10 || *r.CPU.Quota != 50000 || *r.CPU.Period != 100000 {
		t.Errorf("resources wrong: %+v", r)
	}
	want := map[string]uint64{"RLIMIT_NOFILE": 100, "RLIMIT_CPU": 2}
	for _, rl := range s.Process.Rlimits {
		if want[rl.Type] != rl.Hard || rl.Soft != rl.Hard {
			t.Errorf("rlimit %+v", rl)
		}
		delete(want, rl.Type)
	}
	if len(want) != 0 {
		t.Errorf("missing rlimits %v", want)
	}
	s, _ = Compile(&Policy{Command: []string{"true"}}, newFakeFS().host(1000))
	if s.Linux.Resources != nil {
		t.Error("no limits requested, but resources set")
	}
}

func TestCompileExtraMounts(t *testing.T) {
	fake := newFakeFS()
	p := &Policy{Command: []string{"true"}, Mounts: []Mount{
		{Source: "/cache", Dest: "/a/b/cache", Mode: MountRW},
		{Dest: "/a", Mode: MountTmpfs},
		{Source: "/srv/file", Dest: "/srv/file", Mode: MountRO},
	}}
	s, err := Compile(p, fake.host(1000))
	if err != nil {
		t.Fatal(err)
	}
	a, ab := -1, -1
	for i, m := range s.Mounts {
		switch m.Destination {
		case "/a":
			a = i
		case "/a/b/cache":
			ab = i
		}
	}
	if a < 0 || ab < 0 || a > ab {
		t.Errorf("parent tmpfs /a must come before /a/b/cache (got %d, %d)", a, ab)
	}
	if m := mountAt(s, "/a/b/cache"); !hasOption(m, "rw") {
		t.Errorf("--rw must be writable: %+v", m)
	}
}

func TestCompileRejects(t *testing.T) {
	cases := []struct {
		name string
		p    Policy
		want string
	}{
		{"no command", Policy{}, "no command"},
		{"bad net", Policy{Network: "bridge"}, "network mode"},
		{"relative dest", Policy{Mounts: []Mount{{Source: "/data", Dest: "data", Mode: MountRO}}}, "not absolute"},
		{"dotdot dest", Policy{Mounts: []Mount{{Source: "/data", Dest: "/x/../etc", Mode: MountRO}}}, "contains .."},
		{"unclean dest", Policy{Mounts: []Mount{{Source: "/data", Dest: "/x//y", Mode: MountRO}}}, "not clean"},
		{"reserved dest", Policy{Mounts: []Mount{{Source: "/data", Dest: "/workspace", Mode: MountRW}}}, "owned by the runtime"},
		{"proc dest", Policy{Mounts: []Mount{{Source: "/data", Dest: "/proc/sys", Mode: MountRW}}}, "under /proc"},
		{"duplicate", Policy{Mounts: []Mount{{Source: "/data", Dest: "/d", Mode: MountRO}, {Dest: "/d", Mode: MountTmpfs}}}, "twice"},
		{"missing source", Policy{Mounts: []Mount{{Source: "/nope", Dest: "/d", Mode: MountRO}}}, "does not exist"},
		{"symlink source", Policy{Mounts: []Mount{{Source: "/data-link", Dest: "/d", Mode: MountRO}}}, "is a symlink (to /data)"},
		{"relative source", Policy{Mounts: []Mount{{Source: "data", Dest: "/d", Mode: MountRO}}}, "not absolute"},
		{"tmpfs with source", Policy{Mounts: []Mount{{Source: "/data", Dest: "/d", Mode: MountTmpfs}}}, "takes no source"},
		{"bad mode", Policy{Mounts: []Mount{{Source: "/data", Dest: "/d", Mode: "rx"}}}, "mount mode"},
		{"bad env", Policy{Env: []string{"NOEQUALS"}}, "not KEY=VALUE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.p
			if c.name != "no command" {
				p.Command = []string{"true"}
			}
			_, err := Compile(&p, newFakeFS().host(1000))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want error containing %q, got %v", c.want, err)
			}
		})
	}
}

func TestResolveWorkspace(t *testing.T) {
	dir := t.TempDir()
	link := dir + "/link"
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/file", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := (&Policy{Workspace: dir}).ResolveWorkspace(); err != nil || got == "" {
		t.Errorf("real dir: %q %v", got, err)
	}
	for path, want := range map[string]string{
		link:              "is a symlink to",
		dir + "/missing":  "does not exist",
		dir + "/file":     "not a directory",
		dir + "/dangling": "dangling",
	} {
		if want == "dangling" {
			if err := os.Symlink(dir+"/nowhere", path); err != nil {
				t.Fatal(err)
			}
		}
		_, err := (&Policy{Workspace: path}).ResolveWorkspace()
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrWorkspace) {
			t.Errorf("%s: want %q, got %v", path, want, err)
		}
	}
}

func TestCompileSeccomp(t *testing.T) {
	fake := newFakeFS()
	fake.contents = map[string][]byte{
		"/p/docker.json": []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}`),
		"/p/broken.json": []byte(`{"defaultAction":"SCMP_ACT_FROBNICATE"}`),
	}
	s, err := Compile(&Policy{Command: []string{"true"}}, fake.host(1000))
	if err != nil || s.Linux.Seccomp == nil || s.Annotations[AnnotationSeccomp] != "default" {
		t.Fatalf("default policy must carry the default profile: %v %v", err, s.Annotations)
	}
	s, err = Compile(&Policy{Command: []string{"true"}, Seccomp: "/p/docker.json"}, fake.host(1000))
	if err != nil || s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActAllow {
		t.Fatalf("docker profile: %v %+v", err, s.Linux.Seccomp)
	}
	s, err = Compile(&Policy{Command: []string{"true"}, Seccomp: SeccompUnconfined}, fake.host(1000))
	if err != nil || s.Linux.Seccomp != nil || s.Annotations[AnnotationSeccomp] != SeccompUnconfined {
		t.Fatalf("unconfined: %v %+v", err, s.Linux.Seccomp)
	}
	for _, bad := range []string{"/p/broken.json", "/p/missing.json"} {
		if _, err := Compile(&Policy{Command: []string{"true"}, Seccomp: bad}, fake.host(1000)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	// Root mode with a root-owned writable workspace needs the filter.
	h := fake.host(0)
	h.WorkspaceUID = 0
	if _, err := Compile(&Policy{Command: []string{"true"}, Seccomp: SeccompUnconfined}, h); err == nil || !strings.Contains(err.Error(), "setuid") {
		t.Errorf("unconfined with a root-owned rw workspace as root must be refused: %v", err)
	}
}

func TestCompileCapAdd(t *testing.T) {
	s, err := Compile(&Policy{Command: []string{"true"}, CapAdd: []string{"net_raw", "CAP_NET_RAW", "cap_chown"}}, newFakeFS().host(1000))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Process.Capabilities
	if got := strings.Join(c.Ambient, ","); got != "CAP_NET_RAW,CAP_CHOWN" || strings.Join(c.Bounding, ",") != got || strings.Join(c.Permitted, ",") != got {
		t.Errorf("capabilities %+v", c)
	}
	if _, err := Compile(&Policy{Command: []string{"true"}, CapAdd: []string{"CAP_FLY"}}, newFakeFS().host(1000)); err == nil {
		t.Error("unknown capability accepted")
	}
	s, _ = Compile(&Policy{Command: []string{"true"}}, newFakeFS().host(1000))
	if c := s.Process.Capabilities; len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) != 0 {
		t.Errorf("default must hold no capability: %+v", c)
	}
}

// TestCompileCopiesOnlyWorldReadableEtcFiles: a copy is made by the init
// and owned by the sandbox user, so an /etc file that only its owner or
// group may read is bound as it is (still unreadable in the sandbox), not
// copied, whether it is the entry itself or a link's target.
func TestCompileCopiesOnlyWorldReadableEtcFiles(t *testing.T) {
	f := newFakeFS()
	f.files["/etc/gitconfig"] = true
	f.modes = map[string]fs.FileMode{"/etc/gitconfig": 0o640, "/run/resolv.conf": 0o600, "/etc/hosts": 0o604}
	for _, uid := range []int{0, 1000} {
		s, err := Compile(&Policy{Command: []string{"true"}}, f.host(uid))
		if err != nil {
			t.Fatal(err)
		}
		for dest, src := range map[string]string{"/etc/gitconfig": "/etc/gitconfig", "/etc/resolv.conf": "/run/resolv.conf"} {
			if m := mountAt(s, dest); m == nil || m.Type != "bind" || m.Source != src || !hasOption(m, "ro") {
				t.Errorf("uid %d: a non-world-readable %s must be a read-only bind of %s, got %+v", uid, dest, src, m)
			}
		}
		if m := mountAt(s, "/etc/hosts"); m == nil || m.Type != mounts.TypeCopy {
			t.Errorf("uid %d: a world-readable /etc/hosts should be copied, got %+v", uid, m)
		}
	}
}

// TestCompileTemplateCopies: /etc files too big to copy into every root
// but small enough for a template, and readable by all, are listed for the
// root template to copy; unreadable, too big and copied files are not,
// and neither is anything the caller binds.
func TestCompileTemplateCopies(t *testing.T) {
	f := newFakeFS()
	f.files["/etc/gitconfig"] = true
	f.files["/etc/services"] = true
	f.files["/srv/big"] = true
	f.sizes["/etc/gitconfig"] = copyMaxFile + 1
	f.sizes["/etc/services"] = templateCopyMax + 1
	f.sizes["/srv/big"] = copyMaxFile + 1
	f.modes = map[string]fs.FileMode{"/etc/gitconfig": 0o640}
	p := &Policy{Command: []string{"true"}, Mounts: []Mount{{Source: "/srv/big", Dest: "/etc/protocols", Mode: MountRO}}}
	s, err := Compile(p, f.host(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Annotations[mounts.AnnotationTemplateCopies]; got != "/etc/mime.types" {
		t.Errorf("template copies %q, want /etc/mime.types alone", got)
	}
	if m := mountAt(s, "/etc/mime.types"); m == nil || m.Type != "bind" || !hasOption(m, "ro") {
		t.Errorf("a listed file stays a read-only bind in the spec, got %+v", m)
	}
}

// TestCompileRefusesWritableState: a bind (the workspace, --rw, --ro) that
// holds agentrun's state, or lies in it, would let the sandbox plant a plan
// or a filter that a later spawn runs, or read other spawns' environments
// in the cached plans.
func TestCompileRefusesWritableState(t *testing.T) {
	f := newFakeFS()
	for _, d := range []string{"/run", "/run/agentrun", "/run/agentrun/prestart", "/run/agentrun-x", "/srv"} {
		f.dirs[d] = true
	}
	for _, c := range []struct {
		name      string
		workspace string
		mounts    []Mount
		refused   bool
	}{
		{"workspace holds the state", "/run", nil, true},
		{"workspace is the state", "/run/agentrun", nil, true},
		{"workspace lies in it", "/run/agentrun/prestart", nil, true},
		{"rw bind holds it", "/home/u/proj", []Mount{{Source: "/run", Dest: "/r", Mode: MountRW}}, true},
		{"rw bind lies in it", "/home/u/proj", []Mount{{Source: "/run/agentrun/prestart", Dest: "/r", Mode: MountRW}}, true},
		{"ro bind holds it", "/home/u/proj", []Mount{{Source: "/run", Dest: "/r", Mode: MountRO}}, true},
		{"ro bind elsewhere", "/home/u/proj", []Mount{{Source: "/srv", Dest: "/r", Mode: MountRO}}, false},
		{"a sibling with the same prefix", "/run/agentrun-x", nil, false},
		{"elsewhere", "/srv", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := f.host(1000)
			h.Workspace, h.StateRoots = c.workspace, []string{"/run/agentrun"}
			wantStateRefusal(t, h, c.mounts, c.refused)
		})
	}
}

// wantStateRefusal compiles a policy with mounts on h and checks that it
// is refused for holding /run/agentrun, or not.
func wantStateRefusal(t *testing.T, h *HostInfo, mounts []Mount, refused bool) {
	t.Helper()
	_, err := Compile(&Policy{Command: []string{"true"}, Mounts: mounts}, h)
	switch {
	case refused && (err == nil || !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), "/run/agentrun")):
		t.Fatalf("want a policy error naming /run/agentrun, got %v", err)
	case !refused && err != nil:
		t.Fatalf("refused: %v", err)
	}
}
