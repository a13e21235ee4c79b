package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun"
)

func TestParseSpawn(t *testing.T) {
	o, err := parseSpawn([]string{
		"--workspace", "/w", "--ro", "/a:/b", "--ro", "/c", "--rw", "/d:/e", "--tmpfs", "/t",
		"--net", "host", "--memory", "64M", "--pids", "10", "--cpus", "1.5", "--timeout", "2s",
		"--env", "A=1", "--env", "B=2", "--result", "/r.json", "--nofile", "256",
		"--", "sh", "-c", "echo --ro",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p := o.policy
	if p.Workspace != "/w" || p.Network != agentrun.NetworkHost || o.result != "/r.json" {
		t.Errorf("policy %+v", p)
	}
	want := []agentrun.Mount{
		{Source: "/a", Dest: "/b", Mode: agentrun.MountRO}, {Source: "/c", Dest: "/c", Mode: agentrun.MountRO},
		{Source: "/d", Dest: "/e", Mode: agentrun.MountRW}, {Dest: "/t", Mode: agentrun.MountTmpfs},
	}
	if len(p.Mounts) != len(want) {
		t.Fatalf("mounts %+v", p.Mounts)
	}
	for i := range want {
		if p.Mounts[i] != want[i] {
			t.Errorf("mount %d: %+v, want %+v", i, p.Mounts[i], want[i])
		}
	}
	if p.Limits.Memory != 64<<20 || p.Limits.Pids != 10 || p.Limits.CPUs != 1.5 || p.Limits.NoFile != 256 ||
		time.Duration(p.Timeout) != 2*time.Second {
		t.Errorf("limits %+v timeout %v", p.Limits, p.Timeout)
	}
	if strings.Join(p.Command, "|") != "sh|-c|echo --ro" || strings.Join(p.Env, ",") != "A=1,B=2" {
		t.Errorf("command %q env %q", p.Command, p.Env)
	}
}

func TestParseSpawnRejects(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus", "--", "true"},
		{"--memory", "lots", "--", "true"},
		{"--pids", "0", "--", "true"},
		{"--pids", "x", "--", "true"},
		{"--cpus", "-1", "--", "true"},
		{"--timeout", "soon", "--", "true"},
		{"--timeout", "-1s", "--", "true"},
		{"--ro", "", "--", "true"},
		{"--ro", "/a:", "--", "true"},
		{"--nofile", "-3", "--", "true"},
		{"--workspace"},
		{},
	} {
		if _, err := parseSpawn(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

func TestParseSpawnPolicyFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "p.json")
	if err := os.WriteFile(f, []byte(`{"network":"host","env":["A=1"],"command":["echo","from-file"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseSpawn([]string{"--policy", f, "--env", "B=2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.policy.Network != agentrun.NetworkHost || strings.Join(o.policy.Env, ",") != "A=1,B=2" || o.policy.Command[1] != "from-file" {
		t.Errorf("policy %+v", o.policy)
	}
	o, err = parseSpawn([]string{"--policy", f, "--net", "none", "--", "true"}, io.Discard)
	if err != nil || o.policy.Network != agentrun.NetworkNone || o.policy.Command[0] != "true" {
		t.Errorf("flags must override the file: %+v %v", o.policy, err)
	}
	if err := os.WriteFile(f, []byte(`{"netwrok":"host"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseSpawn([]string{"--policy", f, "--", "true"}, io.Discard); err == nil || !strings.Contains(err.Error(), "netwrok") {
		t.Errorf("unknown field must be named: %v", err)
	}
}

func TestRunUnknownCommand(t *testing.T) {
	var b strings.Builder
	if code := run([]string{"frobnicate"}, &b); code != 2 || !strings.Contains(b.String(), "unknown command") {
		t.Errorf("code %d, stderr %q", code, b.String())
	}
}

func TestProbeFlags(t *testing.T) {
	var out, errb strings.Builder
	if code := probeCmd([]string{"--bogus"}, &out, &errb); code != 2 {
		t.Errorf("unknown probe flag: code %d", code)
	}
}

// TestSplitAtFirstDashDash: only a command line whose flags end at its
// first "--" may use the express path, whose cache key stops there.
func TestSplitAtFirstDashDash(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--", "true"}, true},
		{[]string{"--net", "none", "--verbose", "--pids=9", "-ro", "/x", "--", "true"}, true},
		{[]string{"--workspace", "--", "true"}, false},
		{[]string{"--workspace", "--", "--net", "host", "--", "true"}, false},
		{[]string{"--env", "A=1", "--verbose=false", "--", "x", "--", "y"}, true},
		{[]string{"true"}, false},
	} {
		o, err := parseSpawn(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if o.splitAtFirstDashDash != c.want {
			t.Errorf("%q: split at the first -- is %v, want %v", c.args, o.splitAtFirstDashDash, c.want)
		}
	}
}
