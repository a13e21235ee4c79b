//go:build linux

package spawn

import (
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	got, err := ParseProcStat("cpu  100 5 50 1000 20 3 2 7 11 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := (CPUTimes{Busy: 100 + 5 + 50 + 3 + 2, Other: 1000 + 20 + 7}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, err := ParseProcStat(bad); err == nil {
			t.Errorf("ParseProcStat(%q) accepted", bad)
		}
	}
	if _, err := ReadCPUTimes(); err != nil {
		t.Errorf("this machine's /proc/stat: %v", err)
	}
}

func TestPerSpawn(t *testing.T) {
	a := CPUTimes{Busy: 1000}
	// 300 ticks (3 s) over 100 spawns in 2 s of wall time, 0.5 s/s of it
	// background: (3 - 1) s / 100 = 20 ms.
	if got := PerSpawn(a, CPUTimes{Busy: 1300}, 100, 2*time.Second, 0.5); got != 20*time.Millisecond {
		t.Errorf("got %v, want 20ms", got)
	}
	if got := PerSpawn(a, CPUTimes{Busy: 1300}, 100, 2*time.Second, 0); got != 30*time.Millisecond {
		t.Errorf("without background: got %v, want 30ms", got)
	}
	// More background than busy time, a counter that went back, no spawns.
	for _, tc := range []struct {
		after CPUTimes
		n     int
		bg    BusyRate
	}{{CPUTimes{Busy: 1010}, 10, 2}, {CPUTimes{Busy: 900}, 10, 0}, {CPUTimes{Busy: 1300}, 0, 0}} {
		if got := PerSpawn(a, tc.after, tc.n, time.Second, tc.bg); got != 0 {
			t.Errorf("PerSpawn(%+v, n=%d, bg=%v) = %v, want 0", tc.after, tc.n, tc.bg, got)
		}
	}
}
