//go:build linux

package agentrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/seccomp"
)

// The test binary doubles as the holder that keeps a transient systemd
// scope populated (nsinit.HoldCommand), as the CLI does.
func TestMain(m *testing.M) {
	nsinit.Dispatch()
	os.Exit(m.Run())
}

// BenchmarkRun measures the library's spawn path end to end: Run with the
// default Policy starting /bin/true, from NewHostInfo to the Result, with
// the cgroup, the seccomp filter (from a warm disk cache, as the CLI has
// it) and every namespace; "net=host" leaves out the network namespace.
// No CLI start-up is included.
func BenchmarkRun(b *testing.B) {
	ws := b.TempDir()
	cache := &seccomp.DiskCache{Dir: filepath.Join(b.TempDir(), "seccomp")}
	for _, net := range []NetworkMode{NetworkNone, NetworkHost} {
		b.Run("net="+string(net), func(b *testing.B) {
			p := &Policy{Workspace: ws, Network: net, Command: []string{"/bin/true"}}
			opts := Options{SeccompCache: cache}
			// One untimed run: it fills the cache and tells whether this
			// host can build a sandbox at all.
			if err := runTrue(p, opts); err != nil {
				if noSandbox(err) {
					b.Skipf("no sandbox here (needs user namespaces or root): %v", err)
				}
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := runTrue(p, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func runTrue(p *Policy, opts Options) error {
	res, err := Run(context.Background(), p, opts)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("/bin/true in the sandbox: exit %d, signal %d %s", res.ExitCode, res.Signal, res.Error)
	}
	return nil
}

// BenchmarkCompile measures the Policy → Spec step of Run for the default
// Policy: NewHostInfo (workspace resolution, its owner, the environment)
// and Compile (system mounts, /etc entries, the default seccomp profile).
func BenchmarkCompile(b *testing.B) {
	p := &Policy{Workspace: b.TempDir(), Command: []string{"/bin/true"}}
	for b.Loop() {
		h, err := NewHostInfo(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Compile(p, h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSessionExec measures Session.Exec of /bin/true with its output
// captured, in a live session, beside os/exec's Output of /bin/true on the
// host ("host"): the goal is a ratio of at most 1.25.
func BenchmarkSessionExec(b *testing.B) {
	s, err := NewSession(context.Background(), &Policy{Workspace: b.TempDir()}, SessionOptions{})
	if noSandbox(err) {
		b.Skipf("no sandbox here (needs user namespaces or root): %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.Run("session", func(b *testing.B) {
		req := ExecRequest{Args: []string{"/bin/true"}}
		for b.Loop() {
			res, err := s.Exec(context.Background(), req)
			if err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("host", func(b *testing.B) {
		for b.Loop() {
			if _, err := exec.Command("/bin/true").Output(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
