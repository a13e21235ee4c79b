//go:build linux

package spawn

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentrun/agentrun/bench/internal/report"
)

// cgroupParent is the cgroup (in every v1 hierarchy, or the v2 tree) under
// which the root runc contender's containers are placed, so the benchmark
// only ever creates and removes cgroups of its own.
const cgroupParent = "agentrun-bench"

// findStaticBusybox returns a statically linked busybox: the bundle's rootfs
// holds nothing else, so a dynamic one (package busybox) cannot run there.
func findStaticBusybox() (string, error) {
	var reasons []string
	// Where Debian's busybox-static installs its binary.
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox", "/usr/lib/busybox/busybox"} {
		static, err := isStatic(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				reasons = append(reasons, err.Error())
			}
			continue
		}
		if static {
			return p, nil
		}
		reasons = append(reasons, p+" is dynamically linked")
	}
	msg := "no statically linked busybox found (install busybox-static: `make bench-deps`)"
	if len(reasons) > 0 {
		msg += ": " + strings.Join(reasons, "; ")
	}
	return "", errors.New(msg)
}

// isStatic reports whether the ELF file has no program interpreter.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// buildRunc prepares `runc run` on a busybox bundle; rootless selects the
// `runc spec --rootless` variant, run as an unprivileged user.
func buildRunc(ctx context.Context, set *Set, tmp string, rootless bool) *Contender {
	c := &Contender{Name: Runc, Label: "runc run on a busybox bundle (runc spec, read-only root), as root, cgroups v1"}
	if rootless {
		c.Name = RuncRootless
		c.Label = "runc run on a busybox bundle from `runc spec --rootless` (user namespace, no cgroups), as an unprivileged user"
	}
	c.Command = "runc --root STATE run --bundle BUNDLE ID"
	runc, err := exec.LookPath("runc")
	if err != nil {
		c.Status, c.Reason = report.StatusMissing, "runc not installed (run `make bench-deps`)"
		return c
	}
	busybox, err := findStaticBusybox()
	if err != nil {
		c.Status, c.Reason = report.StatusMissing, err.Error()
		return c
	}
	if !rootless && os.Geteuid() != 0 {
		c.Status, c.Reason = report.StatusFailed, "rootful runc needs root; run the driver as root (runc-rootless covers the unprivileged case)"
		return c
	}

	base := filepath.Join(tmp, c.Name)
	bundle := filepath.Join(base, "bundle")
	state := filepath.Join(base, "state")
	uid, gid, asOther := unprivilegedIDs()
	edit := RuncEdit{Args: []string{"/bin/true"}, CurrentHard: currentHardLimit}
	if rootless {
		edit.MapUID, edit.MapGID = &uid, &gid
	} else {
		edit.CgroupsPath = fmt.Sprintf("/%s/runc-%d", cgroupParent, os.Getpid())
	}
	dropped, err := makeBundle(ctx, runc, busybox, bundle, state, rootless, edit)
	if err != nil {
		c.Status, c.Reason = report.StatusFailed, fmt.Sprintf("build bundle: %v", err)
		return c
	}
	for _, d := range dropped {
		set.Notes = append(set.Notes, fmt.Sprintf("%s: dropped %s from config.json (hard limit above ours; no CAP_SYS_RESOURCE to raise it)", c.Name, d))
	}
	if !rootless {
		set.cgroupDirs = append(set.cgroupDirs, strings.TrimPrefix(edit.CgroupsPath, "/"))
	}
	if rootless && asOther {
		// The rootless bundle must be owned by the user it maps to root,
		// else runc cannot create mount points in the rootfs.
		for _, p := range []string{base, filepath.Join(bundle, "rootfs"), state} {
			if err := chownTree(p, uid, gid); err != nil {
				c.Status, c.Reason = report.StatusFailed, err.Error()
				return c
			}
		}
		c.Cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		c.Env = withoutEnv(os.Environ(), "XDG_RUNTIME_DIR")
		c.Label += fmt.Sprintf(" (uid %d)", uid)
	}
	pid := os.Getpid()
	c.Command = fmt.Sprintf("%s --root %s run --bundle %s spawnbench-%d-N", runc, state, bundle, pid)
	c.argv = func(seq uint64) []string {
		return []string{runc, "--root", state, "run", "--bundle", bundle, fmt.Sprintf("spawnbench-%d-%d", pid, seq)}
	}
	return c
}

// makeBundle creates rootfs (busybox plus a /bin/true link to it, and the
// mount points), runs `runc spec` and applies edit to config.json. It
// returns the rlimits it dropped.
func makeBundle(ctx context.Context, runc, busybox, bundle, state string, rootless bool, edit RuncEdit) ([]string, error) {
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return nil, fmt.Errorf("create rootfs: %w", err)
		}
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, fmt.Errorf("create runc state dir: %w", err)
	}
	if err := copyFile(busybox, filepath.Join(rootfs, "bin", "busybox"), 0o755); err != nil {
		return nil, err
	}
	if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", "true")); err != nil {
		return nil, fmt.Errorf("link /bin/true: %w", err)
	}
	args := []string{"spec", "--bundle", bundle}
	if rootless {
		args = append(args, "--rootless")
	}
	if out, err := exec.CommandContext(ctx, runc, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	cfgPath := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("read config.json: %w", err)
	}
	out, dropped, err := edit.Apply(raw)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
		return nil, fmt.Errorf("write config.json: %w", err)
	}
	return dropped, nil
}

// RuncEdit is what the benchmark changes in `runc spec`'s config.json.
type RuncEdit struct {
	Args []string
	// CgroupsPath, when set, becomes linux.cgroupsPath.
	CgroupsPath string
	// MapUID/MapGID, when set, become the host side of the rootless spec's
	// single id mapping (runc spec writes the uid of whoever ran it).
	MapUID, MapGID *int
	// CurrentHard returns the caller's hard limit for an RLIMIT_* name;
	// rlimits above it are dropped because raising a hard limit needs
	// CAP_SYS_RESOURCE. Unknown names are dropped too.
	CurrentHard func(name string) (uint64, bool)
}

// Apply edits config.json: no terminal, Args as the process, a read-only
// root, the cgroup path and id mappings, and only rlimits that can be set.
// It returns the new JSON and the rlimits it dropped.
func (e RuncEdit) Apply(raw []byte) ([]byte, []string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep large numbers (rlimits, capabilities masks) exact
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return nil, nil, fmt.Errorf("parse config.json: %w", err)
	}
	proc, ok := cfg["process"].(map[string]any)
	if !ok {
		return nil, nil, errors.New("config.json has no process object")
	}
	proc["terminal"] = false
	proc["args"] = e.Args
	root, ok := cfg["root"].(map[string]any)
	if !ok {
		return nil, nil, errors.New("config.json has no root object")
	}
	root["readonly"] = true

	var dropped []string
	if rl, ok := proc["rlimits"].([]any); ok {
		kept := make([]any, 0, len(rl))
		for _, item := range rl {
			m, _ := item.(map[string]any)
			name, _ := m["type"].(string)
			hard, err := jsonUint(m["hard"])
			cur, known := uint64(0), false
			if e.CurrentHard != nil {
				cur, known = e.CurrentHard(name)
			}
			if err != nil || !known || hard > cur {
				dropped = append(dropped, fmt.Sprintf("%s (hard %v)", name, m["hard"]))
				continue
			}
			kept = append(kept, item)
		}
		if len(kept) == 0 {
			delete(proc, "rlimits")
		} else {
			proc["rlimits"] = kept
		}
	}

	linux, ok := cfg["linux"].(map[string]any)
	if !ok {
		return nil, nil, errors.New("config.json has no linux object")
	}
	if e.CgroupsPath != "" {
		linux["cgroupsPath"] = e.CgroupsPath
	}
	for key, id := range map[string]*int{"uidMappings": e.MapUID, "gidMappings": e.MapGID} {
		if id == nil {
			continue
		}
		maps, ok := linux[key].([]any)
		if !ok || len(maps) == 0 {
			return nil, nil, fmt.Errorf("config.json has no linux.%s to remap", key)
		}
		for _, m := range maps {
			if mm, ok := m.(map[string]any); ok {
				mm["hostID"] = *id
			}
		}
	}
	out, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		return nil, nil, fmt.Errorf("encode config.json: %w", err)
	}
	return out, dropped, nil
}

func jsonUint(v any) (uint64, error) {
	switch n := v.(type) {
	case json.Number:
		var u uint64
		_, err := fmt.Sscan(n.String(), &u)
		return u, err
	case float64:
		return uint64(n), nil
	}
	return 0, fmt.Errorf("not a number: %v", v)
}

// rlimitNumber maps an OCI rlimit name to its Linux resource number (the
// generic numbering used by x86 and arm).
func rlimitNumber(name string) (int, bool) {
	names := [...]string{"CPU", "FSIZE", "DATA", "STACK", "CORE", "RSS", "NPROC", "NOFILE",
		"MEMLOCK", "AS", "LOCKS", "SIGPENDING", "MSGQUEUE", "NICE", "RTPRIO", "RTTIME"}
	for i, n := range names {
		if "RLIMIT_"+n == name {
			return i, true
		}
	}
	return 0, false
}

func currentHardLimit(name string) (uint64, bool) {
	res, ok := rlimitNumber(name)
	if !ok {
		return 0, false
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(res, &rl); err != nil {
		return 0, false
	}
	return rl.Max, true
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}

func chownTree(root string, uid, gid int) error {
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", root, uid, gid, err)
	}
	return nil
}

func withoutEnv(env []string, keys ...string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, k := range keys {
			if strings.HasPrefix(kv, k+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// removeCgroupTree removes rel (for example agentrun-bench/runc-123) in every
// cgroup hierarchy where runc left it, then its parent if that is empty.
// runc deletes each container's cgroup itself; this catches what a killed
// run leaves behind. Parents still in use by another run are kept.
func removeCgroupTree(rel string) error {
	parent, leaf := filepath.Split(rel)
	parent = filepath.Clean(parent)
	var parents []string
	for _, pattern := range []string{"/sys/fs/cgroup/" + parent, "/sys/fs/cgroup/*/" + parent} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return fmt.Errorf("glob cgroups %s: %w", pattern, err)
		}
		parents = append(parents, m...)
	}
	var errs []error
	for _, p := range parents {
		for _, d := range []string{filepath.Join(p, leaf), p} {
			err := os.Remove(d)
			if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EBUSY) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
