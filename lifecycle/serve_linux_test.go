//go:build linux

package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
	"golang.org/x/sys/unix"
)

// execOut runs script in the serving sandbox with stdout and stderr on
// pipes and returns how it ended and what it wrote.
func execOut(t *testing.T, sb *lifecycle.Sandbox, env []string, script string) (nsinit.Exit, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := sb.Exec(nsinit.ExecSpec{Args: []string{"/bin/sh", "-c", script}, Env: env, Stdout: w, Stderr: w})
	w.Close()
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	out, _ := io.ReadAll(r)
	exit, err := c.Exit()
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return exit, string(out)
}

// procsWith lists host pids whose command line contains marker.
func procsWith(marker string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestServingSandbox is a session's life under the default policy: state
// kept between execs (files, background processes), the policy's
// confinement in every exec, signals to PID 1 ignored, and nothing left
// once it is deleted.
func TestServingSandbox(t *testing.T) {
	e := newEnv(t)
	spec, err := compile(e.ws, "unused")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := lifecycle.Create(context.Background(), spec, lifecycle.Options{ID: "session", StateDir: e.dir, SeccompCache: e.cache, Serve: true})
	var se *lifecycle.StepError
	if errors.As(err, &se) && (se.Step == "user namespace" || se.Step == "clone") {
		t.Skipf("no sandbox here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Delete()
	env := spec.Process.Env
	if _, err := sb.Exec(nsinit.ExecSpec{Args: []string{"/bin/true"}, Env: env}); err == nil {
		t.Error("an exec before Start succeeded")
	}
	if err := sb.Start(); err != nil {
		t.Fatal(err)
	}
	if sb.State() != lifecycle.Running || e.load(t, "session").State != lifecycle.Running {
		t.Fatalf("state after Start: %s", sb.State())
	}

	if exit, out := execOut(t, sb, env, "echo hi > /tmp/x; echo ws > /workspace/from-exec; pwd"); exit.Code != 0 || out != "/workspace\n" {
		t.Fatalf("first exec: %+v %q", exit, out)
	}
	if exit, out := execOut(t, sb, env, "cat /tmp/x"); exit.Code != 0 || out != "hi\n" {
		t.Errorf("/tmp across execs: %+v %q", exit, out)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "from-exec")); err != nil || string(b) != "ws\n" {
		t.Errorf("positive control: the workspace write %q %v", b, err)
	}
	if exit, _ := execOut(t, sb, env, "exit 7"); exit.Code != 7 {
		t.Errorf("exit 7: %+v", exit)
	}
	if exit, out := execOut(t, sb, env, "unshare -U true && echo escaped; touch /tmp/s && chmod u+s /tmp/s && echo setuid; ls /proc/self/fd | tr '\\n' ' '"); strings.Contains(out, "escaped") ||
		strings.Contains(out, "setuid") || !strings.HasSuffix(out, "0 1 2 3 ") {
		t.Errorf("confinement of an exec: %+v %q", exit, out)
	}
	marker := fmt.Sprintf("1000.%06d%03d", os.Getpid()%1000000, time.Now().Nanosecond()%1000)
	if exit, out := execOut(t, sb, env, "sleep "+marker+" >/dev/null 2>&1 & kill -TERM 1; kill -KILL 1; kill -INT 1; echo sent"); exit.Code != 0 || out != "sent\n" {
		t.Fatalf("background and signals to PID 1: %+v %q", exit, out)
	}
	if exit, out := execOut(t, sb, env, "pgrep -f "+marker+" >/dev/null && echo alive"); exit.Code != 0 || out != "alive\n" {
		t.Errorf("the background process of an ended exec: %+v %q", exit, out)
	}
	if sb.State() != lifecycle.Running {
		t.Errorf("state after the execs: %s", sb.State())
	}
	if len(procsWith(marker)) != 1 {
		t.Fatalf("host processes with the marker: %v", procsWith(marker))
	}
	r := e.load(t, "session")
	if err := sb.Delete(); err != nil {
		t.Fatal(err)
	}
	if exit, err := sb.Wait(); err != nil || exit.Signal != int(unix.SIGKILL) {
		t.Errorf("Wait after Delete: %+v %v", exit, err)
	}
	if left := procsWith(marker); len(left) != 0 {
		t.Errorf("processes left after Delete: %v", left)
	}
	if _, err := lifecycle.Load(e.dir, "session"); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Errorf("Load after Delete: %v", err)
	}
	noCgroupLeft(t, r, "")
	if _, err := sb.Exec(nsinit.ExecSpec{Args: []string{"/bin/true"}, Env: env}); err == nil {
		t.Error("an exec after Delete succeeded")
	}
}

// TestExecNeedsServe: a sandbox made to run its command does not exec.
func TestExecNeedsServe(t *testing.T) {
	e := newEnv(t)
	sb := e.create(t, "", "sleep 100")
	if err := sb.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(nsinit.ExecSpec{Args: []string{"/bin/true"}}); err == nil {
		t.Error("Exec on a sandbox without Serve succeeded")
	}
	if err := sb.SignalAll(unix.SIGTERM); err == nil {
		t.Error("SignalAll on a sandbox without Serve succeeded")
	}
}
