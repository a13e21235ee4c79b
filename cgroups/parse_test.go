package cgroups

import (
	"errors"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func i64(v int64) *int64   { return &v }
func u64(v uint64) *uint64 { return &v }
func bptr(v bool) *bool    { return &v }

func TestParseLimits(t *testing.T) {
	l, err := parseLimits(&specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(64 << 20)},
		Pids:   &specs.LinuxPids{Limit: i64(64)},
		CPU:    &specs.LinuxCPU{Quota: i64(50_000), Period: u64(100_000)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := limits{memory: 64 << 20, pids: 64, cpuQuota: 50_000, cpuPeriod: 100_000}
	if l != want {
		t.Fatalf("got %+v want %+v", l, want)
	}
	if got := l.required(); !slices.Equal(got, []string{Memory, Pids, CPU}) {
		t.Fatalf("required %v", got)
	}

	// OCI "no limit" spellings.
	for _, res := range []*specs.LinuxResources{
		nil,
		{},
		{Memory: &specs.LinuxMemory{Limit: i64(-1)}, Pids: &specs.LinuxPids{Limit: i64(0)}, CPU: &specs.LinuxCPU{Quota: i64(-1)}},
		{Memory: &specs.LinuxMemory{}, Pids: &specs.LinuxPids{}, CPU: &specs.LinuxCPU{Period: u64(100_000)}},
	} {
		l, err := parseLimits(res)
		if err != nil || l != (limits{}) || len(l.required()) != 0 {
			t.Errorf("%+v: got %+v, %v; want no limits", res, l, err)
		}
	}

	// Quota without period uses the default period.
	l, err = parseLimits(&specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: i64(25_000)}})
	if err != nil || l.cpuPeriod != DefaultCPUPeriod {
		t.Fatalf("got %+v, %v", l, err)
	}

	for _, res := range []*specs.LinuxResources{
		{Memory: &specs.LinuxMemory{Limit: i64(-5)}},
		{Pids: &specs.LinuxPids{Limit: i64(-2)}},
		{CPU: &specs.LinuxCPU{Quota: i64(10)}},
		{CPU: &specs.LinuxCPU{Quota: i64(50_000), Period: u64(10)}},
		{CPU: &specs.LinuxCPU{Quota: i64(50_000), Period: u64(2_000_000)}},
	} {
		if _, err := parseLimits(res); err == nil {
			t.Errorf("%+v: want an error", res)
		}
	}
}

func TestCPUQuota(t *testing.T) {
	for _, tc := range []struct {
		cpus  float64
		quota int64
	}{
		{0.5, 50_000}, {2, 200_000}, {1.25, 125_000}, {0.001, 1000}, {0, -1}, {-1, -1},
	} {
		q, p := CPUQuota(tc.cpus)
		if q != tc.quota || p != DefaultCPUPeriod {
			t.Errorf("CPUQuota(%v) = %d/%d, want %d/%d", tc.cpus, q, p, tc.quota, DefaultCPUPeriod)
		}
	}
}

func TestUnsupported(t *testing.T) {
	if u := Unsupported(nil); u != nil {
		t.Fatal(u)
	}
	// What agentrun's own compiler produces is fully supported.
	if u := Unsupported(&specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(1 << 30), Swap: i64(1 << 30)},
		Pids:   &specs.LinuxPids{Limit: i64(10)},
		CPU:    &specs.LinuxCPU{Quota: i64(50_000), Period: u64(100_000)},
	}); len(u) != 0 {
		t.Fatalf("unexpected %v", u)
	}
	u := Unsupported(&specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
		Memory:  &specs.LinuxMemory{Limit: i64(1 << 30), Swap: i64(2 << 30), DisableOOMKiller: bptr(true)},
		CPU:     &specs.LinuxCPU{Shares: u64(1024), Cpus: "0-1"},
		Unified: map[string]string{"io.max": "x"},
	})
	want := []string{"devices", "memory.swap", "memory.disableOOMKiller", "cpu.shares", "cpu.cpus", "unified"}
	if !slices.Equal(u, want) {
		t.Fatalf("got %v want %v", u, want)
	}
}

func TestValidID(t *testing.T) {
	for _, ok := range []string{"a", "sandbox-1", "A_b.c-9", strings.Repeat("x", 128)} {
		if err := validID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", ".hidden", "-x", "a/b", "a b", "ü", strings.Repeat("x", 129), "a\n"} {
		if err := validID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseKV(t *testing.T) {
	kv := parseKV([]byte("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"))
	if kv["oom_kill"] != 2 || kv["max"] != 12 || len(kv) != 6 {
		t.Fatalf("%v", kv)
	}
	kv = parseKV([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"))
	if kv["oom_kill"] != 1 {
		t.Fatalf("%v", kv)
	}
	if kv := parseKV([]byte("garbage\nx y\n\n")); len(kv) != 0 {
		t.Fatalf("%v", kv)
	}
}

func TestParseUintAndPids(t *testing.T) {
	if n, ok := parseUint([]byte("67108864\n")); !ok || n != 64<<20 {
		t.Fatal(n, ok)
	}
	if _, ok := parseUint([]byte("max\n")); ok {
		t.Fatal("max parsed as a number")
	}
	if p := parsePids([]byte("12\n7\n\n0\nx\n")); !slices.Equal(p, []int{12, 7}) {
		t.Fatal(p)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/a\040b\011c\134d`); got != "/a b\tc\\d" {
		t.Fatalf("%q", got)
	}
	if got := unescapeMountinfo(`/plain`); got != "/plain" {
		t.Fatal(got)
	}
}

func TestUnusableError(t *testing.T) {
	var err error = unusable(ErrNoDelegation, "one line")
	if !errors.Is(err, ErrNoDelegation) || errors.Is(err, ErrNoController) || err.Error() != "one line" {
		t.Fatal(err)
	}
	var ue *UnusableError
	if !errors.As(err, &ue) || ue.Kind != ErrNoDelegation {
		t.Fatal("errors.As")
	}
}
