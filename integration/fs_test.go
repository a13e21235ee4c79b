//go:build linux

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// hostSecret creates a directory outside any workspace holding a secret
// file, and returns the directory, the file and the secret.
func hostSecret(t *testing.T) (dir, file, secret string) {
	t.Helper()
	dir = tempDir(t)
	secret = token("agentrun-secret-")
	file = filepath.Join(dir, "secret.txt")
	writeFile(t, file, secret+"\n", 0o644)
	return dir, file, secret
}

// TestHostFilesInvisible attacks reads of host files outside the policy.
func TestHostFilesInvisible(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	dir, file, secret := hostSecret(t)

	// A marker directly in the host's /tmp.
	hostTmp, err := os.CreateTemp("", "agentrun-host-tmp-marker-")
	if err != nil {
		t.Fatal(err)
	}
	hostTmp.WriteString(secret)
	hostTmp.Close()
	t.Cleanup(func() { os.Remove(hostTmp.Name()) })

	// And one in the host's /dev/shm (POSIX shared memory).
	shmMarker := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", "agentrun-host-shm-"); err == nil {
			f.WriteString(secret)
			f.Close()
			shmMarker = f.Name()
			t.Cleanup(func() { os.Remove(shmMarker) })
		}
	}

	reads := []struct{ name, sub, path string }{
		{"secret file outside the workspace", "read", file},
		{"secret directory outside the workspace", "ls", dir},
		{"/etc/shadow", "read", "/etc/shadow"},
		{"/etc/gshadow", "read", "/etc/gshadow"},
		{"/etc/ssh", "ls", "/etc/ssh"},
		{"/etc/sudoers", "read", "/etc/sudoers"},
		{"/root", "ls", "/root"},
		{"/home", "ls", "/home"},
		{"host /tmp marker", "read", hostTmp.Name()},
		{"host /tmp marker via /var/tmp", "read", filepath.Join("/var/tmp", filepath.Base(hostTmp.Name()))},
		{"/run", "ls", "/run"},
		{"/var/log", "ls", "/var/log"},
		{"/boot", "ls", "/boot"},
		{"/sys", "ls", "/sys"},
	}
	if shmMarker != "" {
		reads = append(reads, struct{ name, sub, path string }{"host /dev/shm marker", "read", shmMarker})
	}
	for _, tc := range reads {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := attack(t, ws, nil, tc.sub, tc.path)
			mustBlock(t, r, tc.sub+" "+tc.path)
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("the host secret %s appeared inside the sandbox\n%s", secret, r)
			}
		})
	}

	t.Run("/tmp inside is empty", func(t *testing.T) {
		t.Parallel()
		mustBlock(t, attack(t, ws, nil, "ls", "/tmp"), "ls /tmp (must be a fresh, empty tmpfs)")
		mustBlock(t, attack(t, ws, nil, "ls", "/var/tmp"), "ls /var/tmp (must be a fresh, empty tmpfs)")
	})

	// Positive control: the same read works on the workspace, and the
	// system directories are there.
	t.Run("control: workspace and /usr readable", func(t *testing.T) {
		t.Parallel()
		writeFile(t, filepath.Join(ws, "visible.txt"), "visible\n", 0o644)
		d := mustSucceed(t, attack(t, ws, nil, "read", "/workspace/visible.txt"), "read /workspace/visible.txt")
		if !strings.Contains(d, "visible") {
			t.Errorf("read the wrong content: %s", d)
		}
		mustSucceed(t, attack(t, ws, nil, "ls", "/usr/bin"), "ls /usr/bin")
		mustSucceed(t, attack(t, ws, nil, "read", "/etc/passwd"), "read /etc/passwd")
	})
}

// TestEtcCopies: the small /etc files are copies in the tmpfs root, not
// binds. They must hold the host's content, and the sandbox must not be
// able to change or remove them although the init created them.
func TestEtcCopies(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	host, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("content matches the host", func(t *testing.T) {
		d := mustSucceed(t, attack(t, ws, nil, "read", "/etc/passwd"), "read /etc/passwd")
		if first, _, _ := strings.Cut(string(host), "\n"); !strings.Contains(d, first) {
			t.Errorf("the sandbox's /etc/passwd does not start like the host's (%q):\n%s", first, d)
		}
	})
	for _, f := range []string{"/etc/passwd", "/etc/hosts", "/etc/ld.so.cache"} {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			mustBlock(t, attack(t, ws, nil, "chmod", f), "chmod "+f)
			mustBlock(t, attack(t, ws, nil, "unlink", f), "unlink "+f)
			mustBlock(t, attack(t, ws, nil, "exe-write", f), "overwrite "+f)
			mustBlock(t, attack(t, ws, nil, "meta", f), "chown, truncate, utimes, link or rename "+f)
		})
	}
	// The root itself (a tmpfs the init made, so the sandbox user owns it)
	// and its /etc: no new entries, no mode change, no way back to rw.
	t.Run("root", func(t *testing.T) {
		t.Parallel()
		for _, d := range []string{"/", "/etc"} {
			mustBlock(t, attack(t, ws, nil, "chmod", d), "chmod "+d)
			mustBlock(t, attack(t, ws, nil, "write", d+"/agentrun-new", "x"), "create a file in "+d)
			mustBlock(t, attack(t, ws, nil, "meta", d), "chown, utimes, link or rename "+d)
		}
		mustBlock(t, attack(t, ws, nil, "mountop", "remount-rw", "/"), "remount / read-write")
		mustBlock(t, attack(t, ws, nil, "mountop", "setattr-rw", "/"), "mount_setattr / read-write")
		mustBlock(t, attack(t, ws, nil, "mountop", "-userns", "-mountns", "remount-rw", "/"), "remount / read-write from a nested user namespace")
	})
}

// TestWritesOutsideWorkspace attacks writes that must not reach the host.
func TestWritesOutsideWorkspace(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	dir, file, secret := hostSecret(t)
	name := token("agentrun-pwned-")
	hostTmpTarget := "/tmp/" + name
	t.Cleanup(func() { os.Remove(hostTmpTarget) })

	// Symlinks planted in the workspace pointing out of it.
	links := map[string]string{
		"abslink":  dir,                                     // absolute, to the host dir
		"rellink":  filepath.Join("..", filepath.Base(dir)), // sibling, relative
		"filelink": file,                                    // to the host file itself
		"etclink":  "/etc",                                  // to a system dir
		"uplink":   strings.Repeat("../", 12),               // to "/" via ..
		"tmplink":  "/tmp",                                  // to the host /tmp
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(ws, l)); err != nil {
			t.Fatal(err)
		}
	}

	blockedWrites := []struct{ name, path string }{
		{"into /usr", "/usr/" + name},
		{"into /usr/bin", "/usr/bin/" + name},
		{"into /etc", "/etc/" + name},
		{"over /etc/passwd", "/etc/passwd"},
		{"into /", "/" + name},
		{"via abs symlink to host dir", "/workspace/abslink/" + name},
		{"via relative symlink to host dir", "/workspace/rellink/" + name},
		{"via symlink to host file", "/workspace/filelink"},
		{"via symlink to /etc", "/workspace/etclink/" + name},
		{"via .. to /etc", "/workspace/../../etc/" + name},
		{"via .. to host dir", "/workspace/../../.." + dir + "/" + name},
		{"via symlink of ../ to /usr", "/workspace/uplink/usr/" + name},
		{"into the secret dir by its host path", dir + "/" + name},
	}
	for _, tc := range blockedWrites {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mustBlock(t, attack(t, ws, nil, "write", tc.path, "PWNED"), "write "+tc.path)
		})
	}
	t.Run("rename exchange across the workspace boundary", func(t *testing.T) {
		t.Parallel()
		mustBlock(t, attack(t, ws, nil, "rename-exchange", "/workspace/attacker", "/etc/passwd"), "exchange a workspace file with /etc/passwd")
		mustBlock(t, attack(t, ws, nil, "rename-exchange", "/workspace/abslink", "/usr/bin"), "exchange a workspace symlink with /usr/bin")
		mustBlock(t, attack(t, ws, nil, "rename-exchange", "/workspace", "/tmp"), "exchange /workspace with /tmp")
	})
	t.Run("mkdir in /usr and /", func(t *testing.T) {
		t.Parallel()
		mustBlock(t, attack(t, ws, nil, "mkdir", "/usr/"+name), "mkdir /usr/"+name)
		mustBlock(t, attack(t, ws, nil, "mkdir", "/"+name), "mkdir /"+name)
	})

	// Writes the sandbox may make, but which must stay in the sandbox.
	t.Run("sandbox /tmp does not reach host /tmp", func(t *testing.T) {
		t.Parallel()
		mustSucceed(t, attack(t, ws, nil, "write", hostTmpTarget, "PWNED"), "write "+hostTmpTarget+" (sandbox tmpfs)")
		mustSucceed(t, attack(t, ws, nil, "write", "/workspace/tmplink/"+name, "PWNED"), "write through a symlink to /tmp (sandbox tmpfs)")
	})
	t.Run("recreated host path through symlink stays inside", func(t *testing.T) {
		t.Parallel()
		// Make the symlink's target exist inside the sandbox, then write
		// through it: it must land in the sandbox's own /tmp, not on the host.
		r := sh(t, ws, nil, "mkdir -p '"+dir+"' && echo PWNED > /workspace/abslink/"+name+" && cat '"+dir+"/"+name+"'")
		mustExit(t, r, 0, "write through the recreated symlink target")
	})

	t.Cleanup(func() {
		// Report (and undo) anything that did land on the host.
		for _, p := range []string{filepath.Join(dir, name), "/usr/" + name, "/usr/bin/" + name, "/etc/" + name, "/" + name, hostTmpTarget} {
			if exists(p) {
				t.Errorf("SANDBOX ESCAPE: %s was created on the host", p)
				os.RemoveAll(p)
			}
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != secret+"\n" {
			t.Errorf("SANDBOX ESCAPE: host file %s changed: %q, %v", file, b, err)
		}
		if got := listDir(t, dir); !slices.Equal(got, []string{"secret.txt"}) {
			t.Errorf("SANDBOX ESCAPE: host dir %s now holds %v", dir, got)
		}
	})
}

// TestMountDestThroughWorkspaceSymlink checks that extra mount
// destinations are resolved inside the new root: a symlink the sandbox
// left in the workspace must not redirect a later mount (or the mkdir of
// its mount point) onto the host.
func TestMountDestThroughWorkspaceSymlink(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	dir, _, _ := hostSecret(t)
	src := tempDir(t)
	writeFile(t, filepath.Join(src, "f"), "x", 0o644)
	for l, target := range map[string]string{"abslink": dir, "rellink": filepath.Join("..", filepath.Base(dir))} {
		if err := os.Symlink(target, filepath.Join(ws, l)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, flag, value string }{
		{"tmpfs via absolute symlink", "--tmpfs", "/workspace/abslink/sub"},
		{"tmpfs via relative symlink", "--tmpfs", "/workspace/rellink/sub"},
		{"ro bind via absolute symlink", "--ro", src + ":/workspace/abslink/sub"},
		{"rw bind via relative symlink", "--rw", src + ":/workspace/rellink/sub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := tc.value[strings.LastIndex(tc.value, ":")+1:]
			r := sh(t, ws, []string{tc.flag, tc.value}, "echo PWNED > "+dest+"/pwned")
			switch r.code {
			case 0:
				t.Logf("accepted; the mount stayed inside the sandbox")
			case 125:
				t.Logf("refused: %s", strings.TrimSpace(r.stderr))
			default:
				t.Logf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
			}
			if got := listDir(t, dir); !slices.Equal(got, []string{"secret.txt"}) {
				t.Errorf("SANDBOX ESCAPE: the mount or its mount point landed in host dir %s: %v\n%s", dir, got, r)
			}
			if got := listDir(t, src); !slices.Equal(got, []string{"f"}) {
				t.Errorf("bind source %s changed: %v", src, got)
			}
		})
	}
}

// TestProcAndSysHardening attacks the kernel interfaces in /proc and /sys.
func TestProcAndSysHardening(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	masked := []string{
		"/proc/kcore", "/proc/sysrq-trigger", "/proc/keys", "/proc/timer_list", "/proc/kmsg",
		"/proc/config.gz", "/proc/interrupts", "/proc/sched_debug", "/proc/latency_stats",
		"/proc/timer_stats",
	}
	for _, p := range masked {
		t.Run("read "+p, func(t *testing.T) {
			t.Parallel()
			if !exists(p) {
				t.Logf("%s does not exist on this host's kernel; checking it is absent or empty inside too", p)
			}
			mustBlock(t, attack(t, ws, nil, "read", p), "read masked "+p)
		})
	}
	for _, p := range []string{"/proc/acpi", "/proc/scsi"} {
		t.Run("list "+p, func(t *testing.T) {
			t.Parallel()
			mustBlock(t, attack(t, ws, nil, "ls", p), "list masked "+p)
		})
	}
	// Writes to kernel interfaces. A masked file is /dev/null bound over
	// the original, and a device node stays writable on a read-only mount,
	// so there a "successful" write is discarded: that is checked by
	// identity instead.
	writes := []struct {
		path   string
		masked bool
	}{
		{"/proc/sysrq-trigger", true}, {"/proc/keys", true}, {"/proc/timer_list", true},
		{"/proc/sys/kernel/hostname", false}, {"/proc/sys/kernel/core_pattern", false},
		{"/proc/sys/vm/drop_caches", false}, {"/proc/sys/kernel/modprobe", false},
		{"/proc/sys/net/ipv4/ip_forward", false}, {"/proc/sys/kernel/sysrq", false},
		{"/sys/kernel/uevent_helper", false}, {"/sys/fs/cgroup/agentrun-pwned", false},
	}
	for _, w := range writes {
		t.Run("write "+w.path, func(t *testing.T) {
			t.Parallel()
			r := attack(t, ws, nil, "write", w.path, "x")
			if v, _ := r.verdict(); v == "ESCAPED" && w.masked {
				st := attack(t, ws, nil, "stat", w.path)
				if _, d := st.verdict(); strings.HasPrefix(d, w.path+" exists: mode 20") && strings.HasSuffix(d, "rdev 1:3") {
					t.Logf("%s is masked by /dev/null; the write was discarded (%s)", w.path, d)
					return
				}
				t.Errorf("SANDBOX ESCAPE: wrote to %s, which is not masked by /dev/null: %s\n%s", w.path, st.stdout, r)
				return
			}
			mustBlock(t, r, "write "+w.path)
		})
	}
	t.Run("no writable /sys", func(t *testing.T) {
		t.Parallel()
		mustBlock(t, attack(t, ws, nil, "mkdir", "/sys"), "mkdir /sys")
		mustBlock(t, attack(t, ws, nil, "ls", "/sys"), "list /sys")
	})
	t.Run("control: /proc/self works", func(t *testing.T) {
		t.Parallel()
		mustSucceed(t, attack(t, ws, nil, "read", "/proc/self/status"), "read /proc/self/status")
		mustSucceed(t, attack(t, ws, nil, "read", "/proc/sys/kernel/hostname"), "read /proc/sys/kernel/hostname")
	})
}

// TestDevices checks the minimal /dev and that no device can be made.
func TestDevices(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	want := []string{"fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}
	d := mustSucceed(t, attack(t, ws, nil, "ls", "/dev"), "list /dev")
	_, names, _ := strings.Cut(d, ": ")
	got := strings.Split(names, ",")
	if !slices.Equal(got, want) {
		t.Errorf("/dev holds %v, want exactly %v", got, want)
	}
	d = mustSucceed(t, attack(t, ws, nil, "ls", "/dev/pts"), "list /dev/pts")
	if !strings.HasSuffix(d, ": ptmx") {
		t.Errorf("/dev/pts is not a fresh devpts instance: %s", d)
	}
	for _, p := range []string{"/dev/sda", "/dev/vda", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/console", "/dev/tty0", "/dev/fuse", "/dev/net/tun", "/dev/loop0", "/dev/loop-control", "/dev/dm-0", "/dev/nvme0", "/dev/hda"} {
		mustBlock(t, attack(t, ws, nil, "stat", p), "device "+p+" present")
	}
	mustBlock(t, attack(t, ws, nil, "mknod", "/tmp/null"), "mknod in /tmp")
	mustBlock(t, attack(t, ws, nil, "mknod", "/workspace/null"), "mknod in the workspace")
	mustBlock(t, attack(t, ws, nil, "mknod", "/dev/agentrun-mem"), "mknod in /dev")
	if exists(filepath.Join(ws, "null")) {
		t.Errorf("a device node appeared in the host workspace")
	}
	// Positive control: the devices that are there work.
	mustSucceed(t, attack(t, ws, nil, "read", "/dev/zero"), "read /dev/zero")
	mustSucceed(t, attack(t, ws, nil, "write", "/dev/null", "x"), "write /dev/null")
}

// TestSetuidFilesOnHost: a sandbox must not be able to leave a setuid or
// setgid file on the host that runs with more privilege than the sandbox
// had. As root, the workspace idmap presents a root-owned workspace's
// owner (uid 0) as the sandbox user, so a file the sandbox creates there is
// owned by host root, and chmod u+s on it would hand any host user root.
func TestSetuidFilesOnHost(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	owner, group := fileOwner(t, ws)
	r := sh(t, ws, nil, "cp /workspace/attacker /workspace/suid && chmod 6755 /workspace/suid; ls -ln /workspace/suid")
	p := filepath.Join(ws, "suid")
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("the sandbox could not create a file in its workspace: %v\n%s", err, r)
	}
	mode := fi.Mode()
	if mode&(os.ModeSetuid|os.ModeSetgid) == 0 {
		t.Logf("setuid/setgid bits were stripped: %v", mode)
		return
	}
	uid, gid := fileOwner(t, p)
	if uid == os.Geteuid() && gid == os.Getegid() && !isRoot() {
		// Rootless: the file is the caller's own, with the caller's ids;
		// a setuid-self file grants nothing the caller did not have.
		t.Logf("rootless: setuid file owned by the caller (%d:%d), no privilege gained", uid, gid)
		return
	}
	if uid == 0 || gid == 0 {
		os.Chmod(p, 0o644)
		t.Errorf("PRIVILEGE ESCALATION: the sandbox planted a host file %s with mode %v owned by %d:%d (workspace owner %d:%d); any host user who can reach it runs it as root\n%s",
			p, mode, uid, gid, owner, group, r)
		return
	}
	t.Logf("setuid file owned by the workspace owner %d:%d", uid, gid)
}

// TestTLSPrivateKeysHidden: /etc/ssl is bound for the CA certificates; the
// private keys next to them are host secrets and must stay unreadable, also
// for a rootless caller who is in the keys' group on the host (ssl-cert).
func TestTLSPrivateKeysHidden(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/etc/ssl/private"); err != nil {
		t.Skip("no /etc/ssl/private on this host")
	}
	keys, _ := filepath.Glob("/etc/ssl/private/*")
	if len(keys) == 0 {
		// Not listable by this user: try Debian's default key by name.
		keys = []string{"/etc/ssl/private/ssl-cert-snakeoil.key"}
	}
	t.Run("as the caller", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t)
		for _, k := range keys {
			mustBlock(t, attack(t, ws, nil, "read", k), "read TLS private key "+k)
		}
		mustBlock(t, attack(t, ws, nil, "ls", "/etc/ssl/private"), "list /etc/ssl/private")
	})
	t.Run("rootless caller in the key group", func(t *testing.T) {
		needRoot(t)
		u := testUser(t)
		if u == nil {
			t.Skipf("no unprivileged test user ($%s)", envTestUser)
		}
		t.Parallel()
		_, keyGID := fileOwner(t, "/etc/ssl/private")
		sys := credential(t, u)
		sys.Credential.Groups = []uint32{uint32(keyGID)}
		ws := newWorkspace(t)
		chownTree(t, ws, int(sys.Credential.Uid), int(sys.Credential.Gid))
		for _, k := range keys {
			// Control: this caller can read the key on the host.
			host := exec.Command(attackerBin, "read", k)
			host.SysProcAttr = sys
			out, _ := host.Output()
			if !strings.HasPrefix(string(out), "ESCAPED") {
				t.Logf("%s is not readable by %s with group %d on the host either (%s); skipping it", k, u.Username, keyGID, strings.TrimSpace(string(out)))
				continue
			}
			r := spawn(t, spawnCfg{ws: ws, sys: sys}, "/workspace/attacker", "read", k)
			mustBlock(t, r, "read TLS private key "+k+" as a rootless caller in group "+strconv.Itoa(keyGID))
		}
	})
}

// TestSwappedPathRace races the setup: while sandboxes start, the host side
// keeps exchanging (renameat2 RENAME_EXCHANGE) the workspace, or a bind
// source, with a symlink to a secret directory. A sandbox can mount this
// attack on a later one whenever its own workspace contains the other's
// workspace or bind source (a monorepo and a sub-project, a build tree and
// its output directory): both names are inside its workspace, and the
// symlink's target is just a string. Whatever instant the swap hits, the
// later sandbox must either refuse (125) or get the real directory; the
// secret must never appear inside.
func TestSwappedPathRace(t *testing.T) {
	t.Parallel()
	race := func(t *testing.T, swapWorkspace bool) {
		secretDir, _, secret := hostSecret(t)
		base := tempDir(t)
		real := filepath.Join(base, "real")
		alt := filepath.Join(base, "alt")
		if err := os.Mkdir(real, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(real, "secret.txt"), "decoy\n", 0o644)
		if err := os.Symlink(secretDir, alt); err != nil {
			t.Fatal(err)
		}
		cfg := spawnCfg{ws: real}
		if !swapWorkspace {
			cfg = spawnCfg{ws: newWorkspace(t), flags: []string{"--ro", real + ":/data"}}
		}
		stop := make(chan struct{})
		stopped := make(chan struct{})
		var swaps atomic.Int64
		go func() {
			defer close(stopped)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE) == nil {
					swaps.Add(1)
				}
			}
		}()
		outcomes := map[int]int{}
		for i := 0; i < 150; i++ {
			r := spawn(t, cfg, "/bin/sh", "-c", "cat /workspace/secret.txt /data/secret.txt 2>/dev/null; echo x 2>/dev/null >/workspace/pwned; exit 0")
			outcomes[r.code]++
			if strings.Contains(r.stdout, secret) {
				t.Errorf("SANDBOX ESCAPE: the swapped path exposed the host secret directory %s (attempt %d)\n%s", secretDir, i+1, r)
				break
			}
		}
		close(stop)
		<-stopped
		t.Logf("%d swaps; agentrun exit statuses: %v (0 = started on the real directory, 125 = refused the symlink)", swaps.Load(), outcomes)
		if got := listDir(t, secretDir); !slices.Equal(got, []string{"secret.txt"}) {
			t.Errorf("SANDBOX ESCAPE: a sandbox wrote into the host secret directory %s: %v", secretDir, got)
		}
	}
	t.Run("workspace", func(t *testing.T) { t.Parallel(); race(t, true) })
	t.Run("--ro source", func(t *testing.T) { t.Parallel(); race(t, false) })
}

// copiedEtcFile is an /etc file the sandbox gets as a copy (a small
// regular file), or skips the test.
func copiedEtcFile(t *testing.T) string {
	t.Helper()
	for _, f := range []string{"/etc/gitconfig", "/etc/inputrc", "/etc/host.conf", "/etc/profile", "/etc/protocols"} {
		if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
			return f
		}
	}
	t.Skip("none of the candidate /etc files is a regular file here")
	return ""
}

// TestUnreadableEtcFileStaysUnreadable: an /etc file the sandbox would get
// that only its owner or group may read (a host where an admin made
// /etc/gitconfig 0640, say) must neither break every spawn nor reach the
// sandbox readable: it is shown as it is on the host, unreadable. The
// host state is made in a private mount namespace around agentrun.
func TestUnreadableEtcFileStaysUnreadable(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1) on this host")
	}
	target := copiedEtcFile(t)
	t.Parallel()
	for _, mode := range []os.FileMode{0o600, 0o640} {
		t.Run(strconv.FormatUint(uint64(mode), 8), func(t *testing.T) {
			t.Parallel()
			dir, file, secret := hostSecret(t)
			if err := os.Chmod(file, mode); err != nil {
				t.Fatal(err)
			}
			wrapper := filepath.Join(dir, "agentrun-private-etc")
			writeFile(t, wrapper, "#!/bin/sh\nexec unshare -m sh -c 'src=$1 dst=$2 bin=$3; shift 3; mount --bind \"$src\" \"$dst\" && exec \"$bin\" \"$@\"' sh "+
				file+" "+target+" "+agentrunBin+" \"$@\"\n", 0o755)
			ws := newWorkspace(t)
			r := spawn(t, spawnCfg{ws: ws, bin: wrapper}, "/workspace/attacker", "read", target)
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Fatalf("SANDBOX ESCAPE: the sandbox read the host's mode %o %s:\n%s", mode, target, r)
			}
			mustBlock(t, r, "read a mode "+strconv.FormatUint(uint64(mode), 8)+" "+target)
			mustSucceed(t, spawn(t, spawnCfg{ws: ws, bin: wrapper}, "/workspace/attacker", "read", "/etc/passwd"), "read /etc/passwd next to it")
		})
	}
}
