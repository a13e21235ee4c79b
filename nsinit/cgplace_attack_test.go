//go:build linux && cgo

package nsinit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCInitTasksPlacement: with v1 "tasks" files the C init joins the
// cgroup itself before anything else, and the command runs there.
func TestCInitTasksPlacement(t *testing.T) {
	skipWithoutUserns(t)
	dir := cgroupTestDir(t, "cgroup", "pids")
	tasks, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	var stdout bytes.Buffer
	// No Add: the init must place itself.
	spec := testSpec(t, "/bin/sh", "-c", "cat /proc/self/cgroup")
	p, err := Start(&Config{Spec: spec, Stdout: &stdout, Cgroup: &CgroupPlacement{FD: -1, Tasks: []*os.File{tasks}}})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := p.Wait()
	if err != nil || exit.Code != 0 {
		t.Fatalf("wait: %+v %v", exit, err)
	}
	want := ":pids:/" + filepath.Base(dir) + "\n"
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("the command is not in %s; /proc/self/cgroup:\n%s", dir, stdout.String())
	}
}

// TestCInitTasksWriteFailureAborts: when the init cannot join a v1 cgroup
// (the write to a tasks file fails), the spawn fails and nothing of the
// command runs outside the cgroup.
func TestCInitTasksWriteFailureAborts(t *testing.T) {
	skipWithoutUserns(t)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0) // every write: ENOSPC
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	ro, err := os.Open("/dev/null") // a write: EBADF
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for name, f := range map[string]*os.File{"ENOSPC": full, "EBADF": ro} {
		t.Run(name, func(t *testing.T) {
			var stdout bytes.Buffer
			spec := testSpec(t, "/bin/sh", "-c", "echo RAN")
			p, err := Start(&Config{Spec: spec, Stdout: &stdout, Cgroup: &CgroupPlacement{FD: -1, Tasks: []*os.File{f}}})
			if err == nil {
				exit, _ := p.Wait()
				t.Fatalf("the spawn went ahead although the cgroup could not be joined: exit %+v, stdout %q", exit, stdout.String())
			}
			var se *StepError
			if !errors.As(err, &se) || se.Step != "cgroup placement" {
				t.Errorf("want a cgroup placement step error, got %v", err)
			}
			if stdout.Len() > 0 {
				t.Errorf("the command ran: %q", stdout.String())
			}
		})
	}
}
