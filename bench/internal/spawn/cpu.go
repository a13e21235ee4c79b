//go:build linux

package spawn

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/stat: USER_HZ, which is 100 on every
// architecture Linux exposes to user space with a fixed value (x86-64 and
// arm64 included).
const userHZ = 100

// CPUTimes is the machine's CPU time so far, from the first line of
// /proc/stat, in USER_HZ ticks summed over all CPUs.
type CPUTimes struct {
	// Busy is user, nice, system, irq and softirq time (guest time is
	// already part of user): every process and kernel thread, so work the
	// kernel defers to its own threads (namespace teardown, RCU callbacks)
	// counts too.
	Busy uint64
	// Other is idle, iowait and steal time.
	Other uint64
}

// ParseProcStat reads the aggregate "cpu" line of /proc/stat.
func ParseProcStat(s string) (CPUTimes, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return CPUTimes{}, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var v [8]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("/proc/stat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	// user nice system idle iowait irq softirq steal
	return CPUTimes{Busy: v[0] + v[1] + v[2] + v[5] + v[6], Other: v[3] + v[4] + v[7]}, nil
}

// ReadCPUTimes reads /proc/stat now.
func ReadCPUTimes() (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	return ParseProcStat(string(b))
}

// BusyRate is the machine's background busy time per second of wall time.
type BusyRate float64

// Background measures the busy rate over d while the driver sleeps: what
// other work on the machine adds to any interval, subtracted from the CPU
// passes.
func Background(ctx context.Context, d time.Duration) (BusyRate, error) {
	a, err := ReadCPUTimes()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	b, err := ReadCPUTimes()
	if err != nil {
		return 0, err
	}
	return BusyRate(float64(b.Busy-a.Busy) / userHZ / time.Since(start).Seconds()), nil
}

// PerSpawn is the busy CPU time of n spawns between before and after, less
// the background rate over the wall time they took, divided by n. It is
// never negative.
func PerSpawn(before, after CPUTimes, n int, wall time.Duration, bg BusyRate) time.Duration {
	if n <= 0 || after.Busy < before.Busy {
		return 0
	}
	busy := float64(after.Busy-before.Busy)/userHZ - float64(bg)*wall.Seconds()
	if busy <= 0 {
		return 0
	}
	return time.Duration(busy / float64(n) * float64(time.Second))
}

// CPUPerSpawn runs c n times back to back, untimed, and returns the
// machine's busy CPU time per spawn (PerSpawn). Running one contender at a
// time, rather than interleaved, keeps what one spawn leaves to kernel
// threads from being charged to another contender's spawn.
func (r *Runner) CPUPerSpawn(ctx context.Context, c *Contender, n int, bg BusyRate) (time.Duration, error) {
	if !c.Runnable() {
		return 0, fmt.Errorf("%s is not runnable", c.Name)
	}
	n = max(n, 1)
	before, err := ReadCPUTimes()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if s := r.Once(ctx, c, false); s.Err != nil {
			return 0, fmt.Errorf("cpu run: %w", s.Err)
		}
	}
	wall := time.Since(start)
	after, err := ReadCPUTimes()
	if err != nil {
		return 0, err
	}
	return PerSpawn(before, after, n, wall, bg), nil
}
