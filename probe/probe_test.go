package probe

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/agentrun/agentrun/cgroups"
)

func i64(v int64) *int64 { return &v }

func TestParseKernelRelease(t *testing.T) {
	for rel, want := range map[string][3]int{
		"6.18.44-fc-v595":      {6, 18, 44},
		"6.1.0-56-cloud-amd64": {6, 1, 0},
		"5.4":                  {5, 4, 0},
		"4.19.0+":              {4, 19, 0},
		"5.15.0-1019-gke":      {5, 15, 0},
		"":                     {0, 0, 0},
		"darwin":               {0, 0, 0},
	} {
		k := ParseKernelRelease(rel)
		if [3]int{k.Major, k.Minor, k.Patch} != want || k.Release != rel {
			t.Errorf("%q: got %+v want %v", rel, k, want)
		}
	}
	k := ParseKernelRelease("5.11.0")
	if !k.AtLeast(5, 11) || k.AtLeast(5, 12) || !k.AtLeast(4, 20) || k.AtLeast(6, 0) {
		t.Fatal("AtLeast")
	}
}

func TestUsernsBlocker(t *testing.T) {
	base := UsernsReadings{HasUserNS: true, MaxUserNamespaces: i64(15000), Euid: 1000}
	cases := []struct {
		name string
		mod  func(*UsernsReadings)
		want string // substring; "" means no blocker
	}{
		{"nothing blocks", func(r *UsernsReadings) {}, ""},
		{"no CONFIG_USER_NS", func(r *UsernsReadings) { r.HasUserNS, r.MaxUserNamespaces = false, nil }, "CONFIG_USER_NS"},
		{"max 0", func(r *UsernsReadings) { r.MaxUserNamespaces = i64(0) }, "user.max_user_namespaces is 0"},
		{"max 0 blocks root too", func(r *UsernsReadings) { r.MaxUserNamespaces, r.Euid = i64(0), 0 }, "user.max_user_namespaces is 0"},
		{"debian sysctl", func(r *UsernsReadings) { r.UnprivilegedUsernsClone = i64(0) }, "kernel.unprivileged_userns_clone is 0"},
		{"debian sysctl spares root", func(r *UsernsReadings) { r.UnprivilegedUsernsClone, r.Euid = i64(0), 0 }, ""},
		{"debian sysctl on", func(r *UsernsReadings) { r.UnprivilegedUsernsClone = i64(1) }, ""},
		{"apparmor", func(r *UsernsReadings) { r.AppArmorRestrict = i64(1) }, "apparmor_restrict_unprivileged_userns is 1"},
		{"apparmor spares root", func(r *UsernsReadings) { r.AppArmorRestrict, r.Euid = i64(1), 0 }, ""},
		{"limit reached", func(r *UsernsReadings) { r.CloneErr = syscall.ENOSPC }, "limit is reached (user.max_user_namespaces=15000"},
		{"nesting", func(r *UsernsReadings) { r.CloneErr = syscall.EUSERS }, "nested too deeply"},
		{"seccomp of a container", func(r *UsernsReadings) { r.CloneErr = syscall.EPERM }, "seccomp profile or an LSM"},
		{"sysctl explains EPERM first", func(r *UsernsReadings) { r.UnprivilegedUsernsClone, r.CloneErr = i64(0), syscall.EPERM }, "unprivileged_userns_clone"},
		{"chroot", func(r *UsernsReadings) { r.CloneErr = syscall.EINVAL }, "chrooted"},
		{"other", func(r *UsernsReadings) { r.CloneErr = errors.New("boom") }, "failed: boom"},
	}
	for _, c := range cases {
		r := base
		c.mod(&r)
		got := r.Blocker()
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
		if strings.Contains(got, "\n") {
			t.Errorf("%s: not one line: %q", c.name, got)
		}
	}
}

func TestReadUserns(t *testing.T) {
	fsys := fstest.MapFS{
		"proc/self/ns/user":                                     {},
		"proc/sys/user/max_user_namespaces":                     {Data: []byte("7849\n")},
		"proc/sys/kernel/unprivileged_userns_clone":             {Data: []byte("0\n")},
		"proc/sys/kernel/apparmor_restrict_unprivileged_userns": {Data: []byte("garbage")},
	}
	r := ReadUserns(fsys, 1000)
	if !r.HasUserNS || *r.MaxUserNamespaces != 7849 || *r.UnprivilegedUsernsClone != 0 || r.AppArmorRestrict != nil {
		t.Fatalf("%+v", r)
	}
}

// fakeHost is a modern, fully capable unified host.
func fakeHost() Env {
	return Env{
		FS: fstest.MapFS{
			"proc/self/ns/user":                     {},
			"proc/self/ns/mnt":                      {},
			"proc/self/ns/pid":                      {},
			"proc/self/ns/net":                      {},
			"proc/self/ns/ipc":                      {},
			"proc/self/ns/uts":                      {},
			"proc/self/ns/cgroup":                   {},
			"proc/sys/user/max_user_namespaces":     {Data: []byte("15000\n")},
			"proc/sys/kernel/seccomp/actions_avail": {Data: []byte("kill_process kill_thread trap errno user_notif trace log allow\n")},
			"proc/self/status":                      {Data: []byte("Name:\tx\nSeccomp:\t0\nSeccomp_filters:\t0\n")},
			"proc/filesystems":                      {Data: []byte("nodev\tproc\nnodev\toverlay\n")},
		},
		Euid:               1000,
		Uname:              func() (string, error) { return "6.8.0-1-generic", nil },
		TryUserns:          func() error { return nil },
		SeccompActionAvail: func(uint32) error { return nil },
		LandlockABI:        func() (int, error) { return 4, nil },
		PidfdOpenSelf:      func() error { return nil },
		Clone3:             func() error { return syscall.EINVAL },
		Cgroups: func() (cgroups.Info, error) {
			return cgroups.Info{Mode: cgroups.Unified, Driver: "v2", Available: []string{"cpu", "io", "memory", "pids"},
				Usable: []string{"cpu", "memory", "pids"}, Base: "/sys/fs/cgroup/user.slice/x.scope", Delegated: true, Kill: "cgroup.kill"}, nil
		},
	}
}

func TestRunCapableHost(t *testing.T) {
	r := Run(fakeHost())
	if ok, miss := r.Enforceable(); !ok {
		t.Fatalf("not enforceable: %v", miss)
	}
	for _, g := range r.Guarantees {
		if !g.OK {
			t.Errorf("guarantee %q fails: %s", g.Name, g.Detail)
		}
	}
	if !r.Clone3.IntoCgroup || !r.Overlay.Available || !r.Seccomp.UserNotif || r.Landlock.ABI != 4 || !r.Pidfd.Available {
		t.Errorf("%+v", r)
	}
	if r.Cgroups.RootlessDetail != "" || len(r.Cgroups.Rootless) != 3 {
		t.Errorf("rootless: %+v", r.Cgroups)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "The default policy can be enforced") {
		t.Fatalf("table:\n%s", table.String())
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Cgroups.Mode != cgroups.Unified || back.Landlock.ABI != 4 || len(back.Guarantees) != len(r.Guarantees) {
		t.Fatalf("JSON round trip lost data: %s", js.String())
	}
	// The cgroups.Info fields are flattened into "cgroups".
	if !strings.Contains(js.String(), `"mode": "unified"`) || !strings.Contains(js.String(), `"overlay_in_userns"`) {
		t.Fatalf("JSON shape: %s", js.String())
	}
}

func TestRunBlockedHost(t *testing.T) {
	env := fakeHost()
	fsys := env.FS.(fstest.MapFS)
	fsys["proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = &fstest.MapFile{Data: []byte("1\n")}
	delete(fsys, "proc/sys/kernel/seccomp/actions_avail")
	env.TryUserns = func() error { return syscall.EPERM }
	env.SeccompActionAvail = func(uint32) error { return syscall.EINVAL }
	env.LandlockABI = func() (int, error) { return 0, syscall.EOPNOTSUPP }
	env.Clone3 = func() error { return syscall.ENOSYS }
	env.Uname = func() (string, error) { return "5.10.0-28-cloud-amd64", nil }
	env.Cgroups = func() (cgroups.Info, error) {
		return cgroups.Info{Mode: cgroups.Hybrid, Driver: "v1", Available: []string{"cpu", "memory", "pids"}, Usable: []string{},
			Problem: "cgroup v1 hierarchy cpu (/sys/fs/cgroup/cpu) is not writable by uid 1000: ..."}, nil
	}
	r := Run(env)
	ok, miss := r.Enforceable()
	if ok {
		t.Fatal("enforceable on a blocked host")
	}
	joined := strings.Join(miss, "\n")
	for _, want := range []string{"apparmor_restrict_unprivileged_userns", "seccomp filters unavailable"} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing lacks %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "limits") {
		t.Errorf("limits are not required by the default policy:\n%s", joined)
	}
	if r.Clone3.Available || r.Clone3.IntoCgroup || !strings.Contains(r.Clone3.Detail, "ENOSYS") {
		t.Errorf("clone3: %+v", r.Clone3)
	}
	if !strings.Contains(r.Landlock.Detail, "lsm=") {
		t.Errorf("landlock: %+v", r.Landlock)
	}
	if r.Overlay.Available {
		// 5.10 is older than 5.11.
		t.Errorf("overlay: %+v", r.Overlay)
	}
	if len(r.Cgroups.Root) != 3 || len(r.Cgroups.Rootless) != 0 || !strings.Contains(r.Cgroups.RootlessDetail, "not writable") {
		t.Errorf("cgroups: %+v", r.Cgroups)
	}
	var table bytes.Buffer
	r.WriteTable(&table)
	if !strings.Contains(table.String(), "CANNOT be enforced") {
		t.Fatalf("table:\n%s", table.String())
	}
}

func TestRunRootOnHybrid(t *testing.T) {
	env := fakeHost()
	env.Euid = 0
	env.FS.(fstest.MapFS)["proc/sys/kernel/unprivileged_userns_clone"] = &fstest.MapFile{Data: []byte("0")}
	env.Cgroups = func() (cgroups.Info, error) {
		return cgroups.Info{Mode: cgroups.Hybrid, Driver: "v1", Available: []string{"cpu", "cpuacct", "freezer", "memory", "pids"},
			Usable: []string{"cpu", "cpuacct", "freezer", "memory", "pids"}, Kill: "freezer"}, nil
	}
	r := Run(env)
	if ok, miss := r.Enforceable(); !ok {
		t.Fatalf("root: %v", miss)
	}
	if r.Userns.Unprivileged || !strings.HasPrefix(r.Userns.Blocker, "for unprivileged users: ") {
		t.Errorf("userns: %+v", r.Userns)
	}
	if len(r.Cgroups.Root) != 3 || len(r.Cgroups.Rootless) != 0 || !strings.Contains(r.Cgroups.RootlessDetail, "root-owned") {
		t.Errorf("cgroups: %+v", r.Cgroups)
	}
	if r.Clone3.IntoCgroup || !strings.Contains(r.Clone3.Detail, "hybrid") {
		t.Errorf("clone3: %+v", r.Clone3)
	}
}

func TestRunNothingProbed(t *testing.T) {
	// What a non-Linux build sees: no panics, nothing claimed.
	r := Run(Env{Uname: func() (string, error) { return "darwin", nil }})
	if ok, _ := r.Enforceable(); ok {
		t.Fatal("enforceable with nothing probed")
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
}

// TestRootlessThroughScope: a rootless caller whose cgroup is not delegated
// but whose systemd user manager answers gets limits through a transient
// scope, and the report says so.
func TestRootlessThroughScope(t *testing.T) {
	env := fakeHost()
	env.Cgroups = func() (cgroups.Info, error) {
		return cgroups.Info{Mode: cgroups.Unified, Driver: "v2", Available: []string{"cpu", "io", "memory", "pids"},
			Usable: []string{"cpu", "memory", "pids"}, Base: "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service",
			Scope: true, UserManager: "/run/user/1000/systemd/private", Kill: "cgroup.kill"}, nil
	}
	r := Run(env)
	if len(r.Cgroups.Rootless) != 3 || !strings.Contains(r.Cgroups.RootlessDetail, "transient scope") {
		t.Errorf("rootless: %+v", r.Cgroups)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "systemd user manager") || !strings.Contains(table.String(), "/run/user/1000/systemd/private; rootless limits go into a transient scope") {
		t.Errorf("table:\n%s", table.String())
	}
}
