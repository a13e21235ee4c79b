//go:build linux

package spawn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/bench/internal/report"
	"github.com/agentrun/agentrun/bench/internal/sched"
	"github.com/agentrun/agentrun/bench/internal/stats"
)

// Runner runs contenders. Every timed spawn gets the same treatment: argv
// prepared before the clock starts, stdio on /dev/null (no copying
// goroutines), the clock stopped when wait4 returns.
type Runner struct {
	// Null is an open /dev/null used for all three stdio streams.
	Null *os.File
	// Timeout bounds one spawn, so a hung contender fails instead of
	// hanging the benchmark.
	Timeout time.Duration
	// Progress, when set, receives one-line progress messages.
	Progress func(format string, args ...any)
}

// Sample is one spawn.
type Sample struct {
	Dur time.Duration
	Err error
}

func (r *Runner) progress(format string, args ...any) {
	if r.Progress != nil {
		r.Progress(format, args...)
	}
}

// Once spawns c one time. With capture, output is collected and attached to
// a failure, which is what the warm-up wants; timed runs leave it off.
func (r *Runner) Once(ctx context.Context, c *Contender, capture bool) Sample {
	return r.once(ctx, c, capture, nil)
}

// once is Once with an optional wrapper around the argv (GNU time for the
// RSS pass).
func (r *Runner) once(ctx context.Context, c *Contender, capture bool, wrap func([]string) []string) Sample {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	if c.inProc != nil {
		start := time.Now()
		err := c.inProc(ctx)
		return Sample{Dur: time.Since(start), Err: err}
	}
	if c.argv == nil {
		return Sample{Err: fmt.Errorf("%s is not runnable: %s", c.Name, c.Reason)}
	}
	argv := c.argv(c.seq.Add(1))
	if wrap != nil {
		argv = wrap(argv)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env
	cmd.Stdin = r.Null
	var out bytes.Buffer
	if capture {
		cmd.Stdout, cmd.Stderr = &out, &out
	} else {
		cmd.Stdout, cmd.Stderr = r.Null, r.Null
	}
	// Pdeathsig keeps an interrupted benchmark from leaving sandboxes behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: c.Cred}
	cmd.WaitDelay = time.Second

	start := time.Now()
	err := cmd.Start()
	if err == nil {
		err = cmd.Wait()
	}
	s := Sample{Dur: time.Since(start)}
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %v: %w", r.Timeout, err)
		}
		if msg := tail(out.String(), 400); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		s.Err = fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return s
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.Join(strings.Fields(s), " ")
}

// Warmup runs each runnable contender n times (at least once) and marks it
// failed, with the error, if any warm-up run does not exit 0. It also takes
// first-run costs (page cache, binary loading) off the timed runs.
func (r *Runner) Warmup(ctx context.Context, cs []*Contender, n int) error {
	n = max(n, 1)
	for _, c := range cs {
		if !c.Runnable() {
			continue
		}
		for i := 0; i < n; i++ {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("warm-up interrupted: %w", err)
			}
			if s := r.Once(ctx, c, true); s.Err != nil {
				c.Status, c.Reason = report.StatusFailed, fmt.Sprintf("warm-up run %d failed: %v", i+1, s.Err)
				break
			}
		}
		r.progress("warm-up %-14s %s", c.Name, c.Status)
	}
	return nil
}

// Latency runs rounds interleaved rounds over the runnable contenders (each
// round: every contender once, shuffled by rng) and returns one result per
// contender, runnable or not, in the order given.
func (r *Runner) Latency(ctx context.Context, cs []*Contender, rounds int, rng *rand.Rand) ([]report.Contender, error) {
	var active []*Contender
	for _, c := range cs {
		if c.Runnable() {
			active = append(active, c)
		}
	}
	plan, err := sched.Plan(rounds, len(active), rng)
	if err != nil {
		return nil, fmt.Errorf("plan rounds: %w", err)
	}
	type acc struct {
		ms       []float64
		errors   int
		firstErr string
	}
	accs := make([]acc, len(active))
	step := max(rounds/10, 1)
	for round, order := range plan {
		for _, i := range order {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("interrupted in round %d: %w", round+1, err)
			}
			s := r.Once(ctx, active[i], false)
			a := &accs[i]
			if s.Err != nil {
				a.errors++
				if a.firstErr == "" {
					a.firstErr = s.Err.Error()
				}
				continue
			}
			a.ms = append(a.ms, durMS(s.Dur))
		}
		if (round+1)%step == 0 || round+1 == rounds {
			r.progress("round %d/%d", round+1, rounds)
		}
	}

	out := make([]report.Contender, 0, len(cs))
	for _, c := range cs {
		rc := report.Contender{Name: c.Name, Label: c.Label, Command: c.Command, Status: c.Status, Reason: c.Reason}
		for i, a := range active {
			if a != c {
				continue
			}
			ac := accs[i]
			rc.Errors, rc.FirstError = ac.errors, ac.firstErr
			rc.SamplesMS = ac.ms
			if sum, err := stats.Summarize(ac.ms); err == nil {
				rc.Summary = &sum
			} else {
				rc.Status, rc.Reason = report.StatusFailed, fmt.Sprintf("every timed run failed; first: %s", ac.firstErr)
			}
		}
		out = append(out, rc)
	}
	return out, nil
}

// durMS converts to milliseconds rounded to the microsecond, which is all
// the precision a process spawn has.
func durMS(d time.Duration) float64 {
	return math.Round(float64(d.Microseconds())) / 1000
}

// Scale measures each contender at each concurrency level: level workers
// spawn until the level's budget of spawns is used. The budget is split into
// batches, and within a batch the contenders take turns in shuffled order so
// drift is shared, as in Latency.
func (r *Runner) Scale(ctx context.Context, cs []*Contender, levels []int, spawnsPerLevel, batches int, rng *rand.Rand) ([]report.ScalePoint, error) {
	batches = max(batches, 1)
	var points []report.ScalePoint
	for _, level := range levels {
		if level < 1 {
			return nil, fmt.Errorf("concurrency level %d: must be at least 1", level)
		}
		// At least two spawns per worker per batch, so the level is sustained
		// rather than one burst.
		perBatch := max(2*level, spawnsPerLevel/batches)
		type acc struct {
			ms     []float64
			errors int
			first  string
			wall   time.Duration
			spawns int
		}
		accs := make([]acc, len(cs))
		var active []int
		for i, c := range cs {
			if c.Runnable() {
				active = append(active, i)
			}
		}
		plan, err := sched.Plan(batches, len(active), rng)
		if err != nil {
			return nil, fmt.Errorf("plan batches: %w", err)
		}
		for _, order := range plan {
			for _, j := range order {
				i := active[j]
				samples, wall := r.batch(ctx, cs[i], level, perBatch)
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("interrupted at concurrency %d: %w", level, err)
				}
				a := &accs[i]
				a.wall += wall
				a.spawns += len(samples)
				for _, s := range samples {
					if s.Err != nil {
						a.errors++
						if a.first == "" {
							a.first = s.Err.Error()
						}
						continue
					}
					a.ms = append(a.ms, durMS(s.Dur))
				}
			}
		}
		for i, c := range cs {
			p := report.ScalePoint{Contender: c.Name, Concurrency: level, Status: c.Status, Reason: c.Reason}
			if c.Runnable() {
				a := accs[i]
				p.Spawns, p.Errors = a.spawns, a.errors
				p.WallMS = durMS(a.wall)
				if a.wall > 0 {
					p.Throughput = float64(a.spawns-a.errors) / a.wall.Seconds()
				}
				if sum, err := stats.Summarize(a.ms); err == nil {
					p.Latency = &sum
				} else {
					p.Status, p.Reason = report.StatusFailed, fmt.Sprintf("every spawn failed; first: %s", a.first)
				}
				if a.errors > 0 && p.Reason == "" {
					p.Reason = a.first
				}
			}
			points = append(points, p)
			if c.Runnable() {
				r.progress("scale %-14s ×%-3d %s", c.Name, level, p.Status)
			}
		}
	}
	return points, nil
}

// batch runs n spawns of c from level concurrent workers and returns the
// samples and the wall time of the whole batch.
func (r *Runner) batch(ctx context.Context, c *Contender, level, n int) ([]Sample, time.Duration) {
	var (
		next    atomic.Int64
		mu      sync.Mutex
		wg      sync.WaitGroup
		samples = make([]Sample, 0, n)
	)
	start := time.Now()
	for w := 0; w < level; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				s := r.Once(ctx, c, false)
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return samples, time.Since(start)
}

// PeakRSS runs c n times under GNU time (timePath) and returns the median
// of its %M, the peak resident set in KiB of the largest process in the
// contender's tree.
//
// Why not wait4's rusage in the driver: Go starts children with
// CLONE_VM|CLONE_VFORK, and exec records the old (shared, driver's) address
// space's high-water mark into the child's ru_maxrss, so every contender
// would report at least the driver's own RSS. GNU time forks from a tiny
// address space, so its floor is about 1 MiB (the fork+exec row shows it).
func (r *Runner) PeakRSS(ctx context.Context, c *Contender, timePath, scratchDir string, n int) (int64, error) {
	if !c.Runnable() || c.argv == nil {
		return 0, fmt.Errorf("%s is not runnable", c.Name)
	}
	out, err := os.CreateTemp(scratchDir, "rss-*.txt")
	if err != nil {
		return 0, fmt.Errorf("create rss output file: %w", err)
	}
	path := out.Name()
	defer os.Remove(path)
	// The rootless contender runs time as another user, which must be able
	// to write the file; the directory itself is not writable to it.
	if err := out.Chmod(0o666); err != nil {
		out.Close()
		return 0, fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return 0, fmt.Errorf("close %s: %w", path, err)
	}
	wrap := func(argv []string) []string {
		return append([]string{timePath, "-f", "%M", "-o", path}, argv...)
	}
	var kib []int64
	for i := 0; i < max(n, 1); i++ {
		if s := r.once(ctx, c, true, wrap); s.Err != nil {
			return 0, fmt.Errorf("rss run: %w", s.Err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", path, err)
		}
		v, err := ParseTimeRSS(string(raw))
		if err != nil {
			return 0, err
		}
		kib = append(kib, v)
	}
	return stats.MedianInt64(kib), nil
}

// ParseTimeRSS reads GNU time's "-f %M" output: the last non-empty line
// (a non-zero exit adds a "Command exited with ..." line before it).
func ParseTimeRSS(out string) (int64, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	v, err := strconv.ParseInt(last, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("unexpected GNU time output %q", out)
	}
	return v, nil
}
