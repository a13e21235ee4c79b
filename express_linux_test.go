//go:build linux

package agentrun

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestHostRecorder: the recorded host reads give Compile the same answers
// as the real ones, and every path Compile looked at has a fingerprint,
// so the express path checks all of them.
func TestHostRecorder(t *testing.T) {
	p := &Policy{Command: []string{"/bin/true"}, Workspace: t.TempDir()}
	want := mustCompile(t, p)
	rec := &hostRecorder{}
	h, err := recordedHostInfo(p, rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Compile(p, h)
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
	for _, d := range systemDirs {
		if !seen[d] {
			t.Errorf("no fingerprint of %s", d)
		}
	}
	for _, f := range etcFiles {
		if !seen[f] {
			t.Errorf("no fingerprint of %s", f)
		}
	}
	if !seen[h.Workspace] {
		t.Errorf("no fingerprint of the workspace %s", h.Workspace)
	}

	// A profile file's content has no fingerprint: such a spawn has no
	// express record.
	rec = &hostRecorder{}
	if h, err = recordedHostInfo(p, rec); err != nil {
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
