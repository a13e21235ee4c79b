//go:build linux

package main

import (
	"io"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParseFlagsQuickDefaults(t *testing.T) {
	f, err := parseFlags([]string{"-quick", "-seed", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.rounds != 30 || f.warmup != 1 || f.scaleSpawns != 32 || f.rssRuns != 2 || f.seed != 5 {
		t.Errorf("quick defaults: %+v", f)
	}
	// Explicit values win over -quick.
	f, err = parseFlags([]string{"-quick", "-n", "7"}, io.Discard)
	if err != nil || f.rounds != 7 {
		t.Errorf("explicit -n with -quick: %d, %v", f.rounds, err)
	}
	if f.seed == 0 {
		t.Error("seed 0 should be replaced by a clock seed")
	}
}

func TestParseFlagsLists(t *testing.T) {
	f, err := parseFlags([]string{"-only", "bwrap, agentrun-none", "-levels", "1,4", "-scale", "none"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.only, []string{"bwrap", "agentrun-none"}) || !slices.Equal(f.levels, []int{1, 4}) || f.scale != nil {
		t.Errorf("lists: %+v", f)
	}
	for _, bad := range [][]string{{"-only", "docker"}, {"-levels", "0"}, {"-levels", "x"}, {"-n", "0"}, {"extra"}, {"-scale", "podman"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBusyNote(t *testing.T) {
	if busyNote("started", 0) != "" {
		t.Error("idle machine reported busy")
	}
	if msg := busyNote("ended", 1000); msg == "" || !strings.Contains(msg, "ended") {
		t.Errorf("busy machine: %q", msg)
	}
	if busyNote("started", math.NaN()) != "" {
		t.Error("unknown load reported busy")
	}
}

func TestParseFlagsBaseline(t *testing.T) {
	f, err := parseFlags([]string{"-baseline", "/tmp/old", "-only", "bwrap,agentrun-none,agentrun-none@base", "-scale", "agentrun-rootless@base"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.baseline != "/tmp/old" || !slices.Contains(f.only, "agentrun-none@base") {
		t.Errorf("baseline flags: %+v", f)
	}
	for _, bad := range [][]string{{"-only", "agentrun-none@base"}, {"-scale", "agentrun-rootless@base"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil || !strings.Contains(err.Error(), "needs -baseline") {
			t.Errorf("%q without -baseline: %v", bad, err)
		}
	}
}
