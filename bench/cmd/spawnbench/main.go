//go:build linux

// Command spawnbench measures the spawn latency of agentrun side by side with
// its peers (bare fork+exec, unshare, bubblewrap, runc) in one interleaved
// run on one machine, plus throughput and peak RSS under concurrency, and
// writes bench/results/latest.{md,svg,json}. With -baseline it also runs an
// older agentrun build in the same rounds.
//
// Usage (from the repository root):
//
//	go run ./bench/cmd/spawnbench [-n 200] [-quick] [-only bwrap,agentrun-none] [-agentrun bin/agentrun] [-baseline /tmp/agentrun-base.bin] [-out bench/results]
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun/agentrun/bench/internal/machine"
	"github.com/agentrun/agentrun/bench/internal/report"
	"github.com/agentrun/agentrun/bench/internal/sched"
	"github.com/agentrun/agentrun/bench/internal/spawn"
	"github.com/agentrun/agentrun/nsinit"
)

type flags struct {
	rounds      int
	warmup      int
	agentrun    string
	baseline    string
	only        []string
	out         string
	quick       bool
	seed        uint64
	scale       []string
	levels      []int
	scaleSpawns int
	idle        int
	rssRuns     int
	cpuRuns     int
	timeout     time.Duration
}

func main() {
	// The in-process contender's sandboxes may re-execute this binary in
	// one of nsinit's helper roles.
	nsinit.Dispatch()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "spawnbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("spawnbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&f.rounds, "n", 200, "interleaved rounds (timed spawns per contender)")
	fs.IntVar(&f.warmup, "warmup", 3, "warm-up spawns per contender; each must exit 0")
	fs.StringVar(&f.agentrun, "agentrun", "bin/agentrun", "path of the agentrun binary")
	fs.StringVar(&f.baseline, "baseline", "", "path of an older agentrun build to run beside -agentrun as "+strings.Join(spawn.BaseNames(), " and "))
	only := fs.String("only", "", "comma-separated contenders to run (default all: "+strings.Join(spawn.Names(), ",")+")")
	fs.StringVar(&f.out, "out", "bench/results", "directory for latest.md, latest.svg and latest.json")
	fs.BoolVar(&f.quick, "quick", false, "few samples for a smoke run (-n 30, 1 warm-up, small scaling budget) unless set explicitly")
	fs.Uint64Var(&f.seed, "seed", 0, "shuffle seed (0: from the clock; the report records it)")
	scale := fs.String("scale", spawn.AgentrunNone+","+spawn.Bwrap+","+spawn.SessionExec, "contenders for the concurrency runs (\"none\" to skip)")
	levels := fs.String("levels", "1,2,8,32", "concurrency levels")
	fs.IntVar(&f.scaleSpawns, "scale-spawns", 128, "spawns per contender per concurrency level (at least 2 per worker per batch)")
	fs.IntVar(&f.idle, "idle-sessions", 500, "sessions made side by side for the idle-memory figures (0 skips)")
	fs.IntVar(&f.rssRuns, "rss", 5, "untimed runs per contender under GNU time for peak RSS (0: skip)")
	fs.IntVar(&f.cpuRuns, "cpu", 100, "untimed back-to-back runs per contender for the CPU time per spawn (0: skip)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "limit for one spawn")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.quick {
		if !set["n"] {
			f.rounds = 30
		}
		if !set["warmup"] {
			f.warmup = 1
		}
		if !set["idle-sessions"] {
			f.idle = 20
		}
		if !set["scale-spawns"] {
			f.scaleSpawns = 32
		}
		if !set["rss"] {
			f.rssRuns = 2
		}
		if !set["cpu"] {
			f.cpuRuns = 20
		}
	}
	if f.rounds < 1 {
		return f, fmt.Errorf("-n must be at least 1, got %d", f.rounds)
	}
	f.only = splitList(*only)
	if err := validateNames(f.only, f.baseline); err != nil {
		return f, fmt.Errorf("-only: %w", err)
	}
	if *scale != "none" {
		f.scale = splitList(*scale)
		if err := validateNames(f.scale, f.baseline); err != nil {
			return f, fmt.Errorf("-scale: %w", err)
		}
	}
	for _, s := range splitList(*levels) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return f, fmt.Errorf("-levels: %q is not a positive integer", s)
		}
		f.levels = append(f.levels, n)
	}
	if f.seed == 0 {
		f.seed = uint64(time.Now().UnixNano())
	}
	return f, nil
}

// validateNames checks contender names, and that those of the baseline
// build come with one.
func validateNames(names []string, baseline string) error {
	if err := spawn.ValidateOnly(names); err != nil {
		return err
	}
	if baseline != "" {
		return nil
	}
	for _, n := range names {
		if slices.Contains(spawn.BaseNames(), n) {
			return fmt.Errorf("%s needs -baseline", n)
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	started := time.Now()
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "spawnbench: "+format+"\n", a...) }
	loadStart, load1Start := machine.LoadAvg()
	if msg := busyNote("started", load1Start); msg != "" {
		logf("warning: %s", msg)
	}

	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer null.Close()

	set, err := spawn.Build(ctx, spawn.Options{Agentrun: f.agentrun, Baseline: f.baseline, Only: f.only})
	if err != nil {
		return fmt.Errorf("prepare contenders: %w", err)
	}
	defer func() {
		if cerr := set.Close(); cerr != nil {
			logf("cleanup: %v", cerr)
		}
	}()

	r := &spawn.Runner{Null: null, Timeout: f.timeout, Progress: logf}
	if err := r.Warmup(ctx, set.Contenders, f.warmup); err != nil {
		return err
	}
	rng := sched.NewRand(f.seed)
	logf("%d interleaved rounds, seed %d", f.rounds, f.seed)
	results, err := r.Latency(ctx, set.Contenders, f.rounds, rng)
	if err != nil {
		return fmt.Errorf("latency run: %w", err)
	}

	rssNotes := measureRSS(ctx, r, set, results, f.rssRuns, logf)
	cpuNotes := measureCPU(ctx, r, set, results, f.cpuRuns, logf)

	var scaling []report.ScalePoint
	var scaleSet []*spawn.Contender
	for _, name := range f.scale {
		for _, c := range set.Contenders {
			if c.Name == name {
				scaleSet = append(scaleSet, c)
			}
		}
	}
	if len(scaleSet) > 0 && len(f.levels) > 0 {
		batches := 4
		if f.quick {
			batches = 2
		}
		scaling, err = r.Scale(ctx, scaleSet, f.levels, f.scaleSpawns, batches, rng)
		if err != nil {
			return fmt.Errorf("scaling run: %w", err)
		}
	}

	var idle *report.IdleSessions
	if f.idle > 0 {
		logf("idle sessions: making %d", f.idle)
		is := spawn.IdleSessions(ctx, f.agentrun, set.ScratchDir(), f.idle, logf)
		idle = &is
	}

	rep := &report.Report{
		Idle:    idle,
		Started: started,
		Machine: machine.Collect(ctx, map[string][]string{
			"bwrap":     {"bwrap", "--version"},
			"runc":      {"runc", "--version"},
			"unshare":   {"unshare", "--version"},
			"busybox":   {"busybox", "--help"},
			"hyperfine": {"hyperfine", "--version"},
			"time":      {"time", "--version"},
		}),
		Config: report.Config{
			Rounds: f.rounds, Warmup: f.warmup, Seed: f.seed, Quick: f.quick, Only: f.only,
			Agentrun: f.agentrun, BaselineAgentrun: f.baseline, ScaleContenders: f.scale, ScaleLevels: f.levels, ScaleSpawns: f.scaleSpawns,
			RSSRuns: f.rssRuns, CPURuns: f.cpuRuns, IdleSessions: f.idle,
		},
		Baseline:   spawn.Bwrap,
		Floor:      spawn.ForkExec,
		Contenders: results,
		Scaling:    scaling,
	}
	loadEnd, load1End := machine.LoadAvg()
	rep.Machine.LoadStart, rep.Machine.LoadEnd = loadStart, loadEnd
	for _, m := range []string{busyNote("started", load1Start), busyNote("ended", load1End)} {
		if m != "" {
			rep.Notes = append(rep.Notes, m)
		}
	}
	rep.Notes = append(append(append(rep.Notes, notes(f, set)...), rssNotes...), cpuNotes...)
	rep.ComputeRatios()
	rep.Notes = append(rep.Notes, rep.BaseComparison()...)
	rep.ElapsedS = time.Since(started).Seconds()

	if err := rep.Text(stdout); err != nil {
		return err
	}
	written, err := rep.WriteFiles(f.out)
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", strings.Join(written, ", "))
	return nil
}

func notes(f flags, set *spawn.Set) []string {
	n := []string{
		"Latency is wall time in the Go driver from os/exec Start (fork) to wait4 returning, so every contender pays its own start-up: the CLI's runtime init, namespace and mount setup, exec of /bin/true, teardown.",
		"Peak RSS is GNU time's %M (wait4 ru_maxrss seen from a small parent): the largest resident set of any single process in the spawned tree (for agentrun: the CLI or its init child), median of untimed runs. Its floor is about 1 MiB, see fork+exec. The driver does not use its own wait4 rusage because Go's vfork-style spawn charges the driver's RSS to every child.",
		"Ratios divide medians measured in the same interleaved run; ×bwrap below 1 means faster than bubblewrap.",
		"CPU ms is the machine's busy CPU time per spawn (user, nice, system, irq and softirq from /proc/stat, over every CPU, process and kernel thread, so teardown the kernel defers to its own threads counts too), from back-to-back untimed spawns of one contender, less the background rate measured while the driver slept for a second before. It includes the driver's own fork, exec and wait (about the fork+exec row's value). Wall time cannot drop below CPU time divided by the number of CPUs the spawn's work can spread over.",
	}
	if f.rounds < 100 {
		n = append(n, fmt.Sprintf("With %d samples p99 is close to the maximum; use the default -n for p99.", f.rounds))
	}
	if sum, err := fileDigest(f.agentrun); err == nil {
		n = append(n, fmt.Sprintf("agentrun binary %s sha256 %s.", f.agentrun, sum))
	}
	if f.baseline != "" {
		if sum, err := fileDigest(f.baseline); err == nil {
			n = append(n, fmt.Sprintf("Baseline agentrun binary (the %s rows) %s sha256 %s.", report.BaseSuffix, f.baseline, sum))
		}
	}
	return append(n, set.Notes...)
}

// busyNote warns when the 1-minute load exceeds half the CPUs: other work
// inflates every contender (tails most), and the report should say so
// rather than present the numbers as clean.
func busyNote(when string, load1 float64) string {
	if limit := float64(runtime.NumCPU()) / 2; !(load1 > limit) {
		return ""
	}
	return fmt.Sprintf("The machine was busy when the run %s (1-minute load %.2f on %d CPUs): absolute numbers and tails are inflated; ratios from the interleaved run are more robust.", when, load1, runtime.NumCPU())
}

// eachMeasured calls measure for every contender with an ok result and
// returns a note for each failure.
func eachMeasured(set *spawn.Set, results []report.Contender, measure func(*spawn.Contender, *report.Contender) error) []string {
	var notes []string
	for i := range results {
		rc := &results[i]
		if rc.Status != report.StatusOK {
			continue
		}
		for _, c := range set.Contenders {
			if c.Name == rc.Name {
				if err := measure(c, rc); err != nil {
					notes = append(notes, fmt.Sprintf("%s: %v", c.Name, err))
				}
			}
		}
	}
	return notes
}

// measureRSS fills MaxRSSKiB of the measured contenders from untimed runs
// under GNU time, and returns notes on what could not be measured.
func measureRSS(ctx context.Context, r *spawn.Runner, set *spawn.Set, results []report.Contender, runs int, logf func(string, ...any)) []string {
	if runs <= 0 {
		return []string{"Peak RSS not measured (-rss 0)."}
	}
	timePath, err := gnuTime(ctx)
	if err != nil {
		return []string{fmt.Sprintf("Peak RSS not measured: %v.", err)}
	}
	notes := eachMeasured(set, results, func(c *spawn.Contender, rc *report.Contender) error {
		kib, err := r.PeakRSS(ctx, c, timePath, set.ScratchDir(), runs)
		if err != nil {
			return fmt.Errorf("peak RSS not measured: %w", err)
		}
		rc.MaxRSSKiB = kib
		return nil
	})
	logf("peak RSS measured (%d runs each)", runs)
	return notes
}

// measureCPU fills CPUMS of the measured contenders from back-to-back
// untimed runs, and returns notes on what could not be measured.
func measureCPU(ctx context.Context, r *spawn.Runner, set *spawn.Set, results []report.Contender, runs int, logf func(string, ...any)) []string {
	if runs <= 0 {
		return []string{"CPU time per spawn not measured (-cpu 0)."}
	}
	bg, err := spawn.Background(ctx, time.Second)
	if err != nil {
		return []string{fmt.Sprintf("CPU time per spawn not measured: %v.", err)}
	}
	notes := []string{fmt.Sprintf("Background busy CPU before the CPU pass: %.0f ms per second.", float64(bg)*1000)}
	notes = append(notes, eachMeasured(set, results, func(c *spawn.Contender, rc *report.Contender) error {
		d, err := r.CPUPerSpawn(ctx, c, runs, bg)
		if err != nil {
			return fmt.Errorf("CPU time not measured: %w", err)
		}
		rc.CPUMS = float64(d.Microseconds()) / 1000
		return nil
	})...)
	logf("CPU time per spawn measured (%d runs each)", runs)
	return notes
}

// gnuTime finds GNU time (package "time"); busybox's applet is not used
// because it scales ru_maxrss as if it were pages.
func gnuTime(ctx context.Context) (string, error) {
	p, err := exec.LookPath("time")
	if err != nil {
		return "", errors.New("GNU time not installed (run `make bench-deps`)")
	}
	out, _ := exec.CommandContext(ctx, p, "--version").CombinedOutput()
	if !strings.Contains(string(out), "GNU") {
		return "", fmt.Errorf("%s is not GNU time", p)
	}
	return p, nil
}

// fileDigest identifies the measured agentrun build in the report.
func fileDigest(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	fi, err := fh.Stat()
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16] + ", built " + fi.ModTime().UTC().Format(time.RFC3339), nil
}
