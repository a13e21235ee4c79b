package darwin

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTranslateMounts(t *testing.T) {
	got, warns, err := TranslateMounts([]MountRequest{
		{Source: "/data", Dest: "/data", Kind: "ro"},
		{Source: "/Users/a/cache/", Dest: "/cache", Kind: "rw"},
		{Dest: "/scratch", Kind: "tmpfs"},
		{Source: "/x", Kind: "ro"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{{Path: "/data"}, {Path: "/Users/a/cache", Writable: true}, {Path: "/x"}}
	if !slices.Equal(got, want) {
		t.Errorf("mounts = %+v, want %+v", got, want)
	}
	if len(warns) != 2 || !strings.Contains(warns[0], "cannot remap") || !strings.Contains(warns[1], "tmpfs /scratch") {
		t.Errorf("warnings = %q", warns)
	}
	for _, bad := range []MountRequest{{Source: "rel", Dest: "/d", Kind: "ro"}, {Source: "/a", Dest: "/a", Kind: "overlay"}} {
		if _, _, err := TranslateMounts([]MountRequest{bad}); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestLimitsUnenforceable(t *testing.T) {
	if got := (Limits{}).Unenforceable(); len(got) != 0 {
		t.Errorf("no limits set, got %q", got)
	}
	got := Limits{Memory: 1 << 20, CPUs: 0.5, CPUTime: time.Second}.Unenforceable()
	if !slices.Equal(got, []string{"memory", "cpus", "cpu_time"}) {
		t.Errorf("Unenforceable = %q", got)
	}
}
