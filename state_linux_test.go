//go:build linux

package agentrun

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/statedir"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestRunSpecRefusesStateBinds: a spec that did not come from a Policy
// (RunSpec) gets the check Compile gives a Policy's binds: none may hold
// or lie in agentrun's state, read-only or not. It is refused before
// anything starts, so this needs no privileges.
func TestRunSpecRefusesStateBinds(t *testing.T) {
	root := statedir.Candidates(os.Geteuid())[0]
	for _, m := range []specs.Mount{
		{Destination: "/mnt", Type: "bind", Source: filepath.Dir(root), Options: []string{"rbind", "rw"}},
		{Destination: "/mnt", Type: "bind", Source: root, Options: []string{"rbind", "ro"}},
		{Destination: "/mnt", Type: "none", Source: filepath.Join(root, "prestart"), Options: []string{"bind"}},
	} {
		spec := &specs.Spec{Process: &specs.Process{Args: []string{"/bin/true"}}, Linux: &specs.Linux{}, Mounts: []specs.Mount{m}}
		_, err := RunSpec(context.Background(), spec, time.Second, Options{}, time.Now())
		if !errors.Is(err, ErrPolicy) {
			t.Errorf("RunSpec with a bind of %s (%v): %v, want a policy error", m.Source, m.Options, err)
		}
	}
}
