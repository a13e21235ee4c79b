//go:build linux

package lifecycle

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrun/agentrun/internal/statedir"
	"github.com/agentrun/agentrun/mounts"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestRootTemplateWritableBind: a sandbox with a read-write bind that holds
// the root templates, or lies among them, gets no template (it would write
// to every other sandbox's root); a read-only one, or a sibling path that
// merely starts with the same name, does not matter.
func TestRootTemplateWritableBind(t *testing.T) {
	const dir = "/run/agentrun-templates"
	bind := func(src string, opt string) *specs.Spec {
		return &specs.Spec{Mounts: []specs.Mount{{Destination: "/mnt", Type: "bind", Source: src, Options: []string{"rbind", opt}}}}
	}
	for _, c := range []struct {
		src, opt string
		want     bool
	}{
		{dir, "rw", true},
		{"/run", "rw", true},
		{"/", "rw", true},
		{dir + "/0123", "rw", true},
		{"/run", "ro", false},
		{dir + "2", "rw", false},
		{"/usr", "rw", false},
	} {
		if got := writesTo(bind(c.src, c.opt), dir); got != c.want {
			t.Errorf("a %s bind of %s: writesTo %v, want %v", c.opt, c.src, got, c.want)
		}
	}

	// Through rootTemplate, with this caller's own templates directory.
	x := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", x)
	own := filepath.Join(statedir.Root(os.Geteuid()), "templates")
	if os.Geteuid() == 0 {
		own = statedir.Root(0) + "-templates"
	}
	spec := bind(filepath.Dir(own), "rw")
	spec.Annotations = map[string]string{mounts.AnnotationRootfs: "tmpfs"}
	if got, tm, _ := rootTemplate(spec, false); tm != nil || got != spec {
		if tm != nil {
			tm.Close()
		}
		t.Fatalf("a spec with a read-write bind of %s got the template %v", filepath.Dir(own), tm)
	}
}
