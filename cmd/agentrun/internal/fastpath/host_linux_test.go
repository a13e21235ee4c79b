//go:build linux && cgo

package fastpath

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/cgroups"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestHostRecorder: the recorded host reads give Compile the same answers
// as the real ones, and every path Compile looked at has a fingerprint,
// so the express path checks all of them.
func TestHostRecorder(t *testing.T) {
	p := &agentrun.Policy{Command: []string{"/bin/true"}, Workspace: t.TempDir()}
	host, err := agentrun.NewHostInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	want, err := agentrun.Compile(p, host)
	if err != nil {
		t.Fatal(err)
	}
	path := New(Config{Record: true})
	rec := path.rec
	h, err := agentrun.NewHostInfoWith(p, path.HostInfo())
	if err != nil {
		t.Fatal(err)
	}
	got, err := agentrun.Compile(p, h)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("Compile through the recorder differs from Compile on the host")
	}
	if rec.unsupported {
		t.Fatal("the default policy's host reads were marked unsupported")
	}
	seen := map[string]bool{}
	for _, l := range rec.lines() {
		f := strings.Split(l, "\t")
		if len(f) < 3 || (f[0] == "L" && len(f) != 3 && len(f) != 8 && len(f) != 9) {
			t.Fatalf("malformed fingerprint %q", l)
		}
		// Regular files carry their change time (a root template holds
		// copies of them); nothing else does.
		if fi, err := os.Lstat(f[1]); f[0] == "L" && err == nil && (len(f) == 9) != fi.Mode().IsRegular() {
			t.Errorf("fingerprint %q: %d fields for a %v", l, len(f), fi.Mode().Type())
		}
		seen[f[1]] = true
	}
	for _, d := range []string{"/usr", "/bin", "/lib", "/etc/passwd", "/etc/group", "/etc/hosts"} {
		if _, err := os.Lstat(d); err == nil && !seen[d] {
			t.Errorf("no fingerprint of %s", d)
		}
	}
	if !seen[h.Workspace] {
		t.Errorf("no fingerprint of the workspace %s", h.Workspace)
	}

	// A profile file's content has no fingerprint: such a spawn has no
	// express record.
	path = New(Config{Record: true})
	rec = path.rec
	if h, err = agentrun.NewHostInfoWith(p, path.HostInfo()); err != nil {
		t.Fatal(err)
	}
	_, _ = h.ReadFile("/etc/hostname")
	if !rec.unsupported {
		t.Error("a file read left the recording usable")
	}
	rec = &hostRecorder{}
	_, _ = rec.lstat("/etc/passwd\nL\t/x\t-")
	if !rec.unsupported {
		t.Error("a path with a newline left the recording usable")
	}
}

// TestExpressUndelegated: the record of a sandbox without a cgroup holds
// the reason as the cgroups Manager decided it: its own read of the
// caller's cgroups ("C", not a later one, which a caller that moved
// meanwhile would pair with the old cgroup's paths), the hierarchy and the
// caller's directory ("L") and the access check's answer ("A").
func TestExpressUndelegated(t *testing.T) {
	mount := t.TempDir()
	caller := filepath.Join(mount, "user.slice")
	if err := os.Mkdir(caller, 0o755); err != nil {
		t.Fatal(err)
	}
	und := &cgroups.Undelegated{Mount: mount, Caller: caller, Access: syscall.EACCES, StateDir: "/run/user/1000/agentrun/cgroups", CallerHash: "00000000deadbeef"}
	spec := &specs.Spec{Linux: &specs.Linux{}}
	sigs := []syscall.Signal{syscall.SIGTERM}
	x := expressUndelegated(spec, sigs, &hostRecorder{}, und)
	if x == nil || !x.NoCgroup || x.StateDir != und.StateDir || x.CgroupDir != "" || x.PidsMax != 0 {
		t.Fatalf("record %+v, want no cgroup with state dir %s", x, und.StateDir)
	}
	want := []string{"C\t00000000deadbeef", fmt.Sprintf("A\t%s\t%d", caller, int(syscall.EACCES))}
	for _, w := range want {
		if !slices.Contains(x.Fingerprints, w) {
			t.Errorf("fingerprints %q lack %q", x.Fingerprints, w)
		}
	}
	for _, p := range []string{mount, caller} {
		if !slices.ContainsFunc(x.Fingerprints, func(f string) bool { return strings.HasPrefix(f, "L\t"+p+"\t") }) {
			t.Errorf("fingerprints %q lack an lstat of %s", x.Fingerprints, p)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(x.Fingerprints), func(f string) bool { return !strings.HasPrefix(f, "C\t") })); n != 1 {
		t.Errorf("%d C fingerprints, want 1: %q", n, x.Fingerprints)
	}
	// Requested limits are never left out; no reason, no record.
	limited := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{}}}
	if x := expressUndelegated(limited, sigs, &hostRecorder{}, und); x != nil {
		t.Errorf("a record for a spec with resources: %+v", x)
	}
	if x := expressUndelegated(spec, sigs, &hostRecorder{}, nil); x != nil {
		t.Errorf("a record without a reason: %+v", x)
	}
}

// TestImpliedResolveDropped: an "E" fingerprint whose path has an "L"
// fingerprint of each of its components, none a symlink, says nothing
// they do not, and is left out; any other stays.
func TestImpliedResolveDropped(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	link := filepath.Join(dir, "link")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", link); err != nil {
		t.Fatal(err)
	}
	lstatAll := func(rec *hostRecorder, p string) {
		for ; p != "/"; p = filepath.Dir(p) {
			_, _ = rec.lstat(p)
		}
	}
	has := func(lines []string, prefix string) bool {
		return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
	}

	rec := &hostRecorder{}
	lstatAll(rec, sub)
	_, _ = rec.resolve(sub)
	if l := rec.lines(); has(l, "E\t"+sub+"\t") {
		t.Errorf("E of %s kept although its components' L lines imply it:\n%s", sub, strings.Join(l, "\n"))
	}

	// Without an L line for one of its directories, it stays.
	rec = &hostRecorder{}
	_, _ = rec.lstat(sub)
	_, _ = rec.resolve(sub)
	if l := rec.lines(); !has(l, "E\t"+sub+"\t") {
		t.Errorf("E of %s dropped without L lines for its directories:\n%s", sub, strings.Join(l, "\n"))
	}

	// Through a symlink, it stays (and resolves elsewhere anyway).
	rec = &hostRecorder{}
	lstatAll(rec, filepath.Join(link, "x"))
	_, _ = rec.resolve(link)
	if l := rec.lines(); !has(l, "E\t"+link+"\t"+sub) {
		t.Errorf("E of the symlink %s dropped:\n%s", link, strings.Join(l, "\n"))
	}

	// A path that does not resolve stays too.
	rec = &hostRecorder{}
	missing := filepath.Join(sub, "missing")
	lstatAll(rec, missing)
	_, _ = rec.resolve(missing)
	if l := rec.lines(); !has(l, "E\t"+missing+"\t-") {
		t.Errorf("E of the missing %s dropped:\n%s", missing, strings.Join(l, "\n"))
	}
}
