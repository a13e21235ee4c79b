// Package report holds the results of one benchmark run and renders them as a
// terminal table, a markdown report, an SVG chart and JSON.
//
// It is pure: it never measures anything, so every rendering is testable from
// a hand-built Report.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/agentrun/agentrun/bench/internal/machine"
	"github.com/agentrun/agentrun/bench/internal/stats"
)

// Status says whether a contender was measured, and if not, why.
type Status string

const (
	StatusOK          Status = "ok"
	StatusMissing     Status = "missing"           // tool or binary not installed
	StatusFailed      Status = "failed"            // present, but the warm-up did not exit 0
	StatusUnavailable Status = "not yet available" // planned contender without an implementation
)

// Contender is the outcome for one contender of the latency benchmark.
type Contender struct {
	Name    string `json:"name"`
	Label   string `json:"label"`
	Command string `json:"command,omitempty"`
	Status  Status `json:"status"`
	// Reason explains a non-ok Status (the error, the missing tool).
	Reason string `json:"reason,omitempty"`
	// Errors counts timed runs that did not exit 0; they are excluded from
	// Summary, and FirstError keeps the first one's message.
	Errors     int            `json:"errors"`
	FirstError string         `json:"first_error,omitempty"`
	Summary    *stats.Summary `json:"summary_ms,omitempty"`
	// MaxRSSKiB is the peak resident set of the largest process in the
	// contender's tree (GNU time's %M, median over a few untimed runs);
	// 0 when not measured.
	MaxRSSKiB int64 `json:"max_rss_kib,omitempty"`
	// CPUMS is the machine's busy CPU time per spawn, in milliseconds,
	// from back-to-back untimed spawns (spawn.CPUPerSpawn); 0 when not
	// measured.
	CPUMS      float64   `json:"cpu_ms,omitempty"`
	RatioBwrap *float64  `json:"ratio_to_bwrap,omitempty"`
	RatioFloor *float64  `json:"ratio_to_fork_exec,omitempty"`
	SamplesMS  []float64 `json:"samples_ms,omitempty"`
}

// ScalePoint is one contender at one concurrency level.
type ScalePoint struct {
	Contender   string `json:"contender"`
	Concurrency int    `json:"concurrency"`
	Status      Status `json:"status"`
	Reason      string `json:"reason,omitempty"`
	Spawns      int    `json:"spawns"`
	Errors      int    `json:"errors"`
	// WallMS is the summed wall time of the batches, so Throughput is
	// Spawns / WallMS * 1000 spawns per second.
	WallMS     float64        `json:"wall_ms"`
	Throughput float64        `json:"spawns_per_s"`
	Latency    *stats.Summary `json:"latency_ms,omitempty"`
}

// IdleSessions is the memory of many sessions idling side by side (made
// by agentrun create: a holder process and an init each).
type IdleSessions struct {
	Sessions     int     `json:"sessions"`
	Status       Status  `json:"status"`
	Reason       string  `json:"reason,omitempty"`
	CreateWallMS float64 `json:"create_wall_ms"`
	// Totals over every holder and init, in KiB: PSS counts a shared
	// page once across them, RSS once per process.
	PSSKiB       int64 `json:"pss_kib"`
	RSSKiB       int64 `json:"rss_kib"`
	AnonKiB      int64 `json:"anon_kib"`
	HolderPSSKiB int64 `json:"holder_pss_kib"`
	// MemAvailableDropKiB is how much MemAvailable fell while they were
	// made (kernel memory included).
	MemAvailableDropKiB int64 `json:"mem_available_drop_kib"`
}

// Config is how the run was invoked, recorded so it can be repeated.
type Config struct {
	Rounds   int      `json:"rounds"`
	Warmup   int      `json:"warmup"`
	Seed     uint64   `json:"seed"`
	Quick    bool     `json:"quick"`
	Only     []string `json:"only,omitempty"`
	Agentrun string   `json:"agentrun"`
	// BaselineAgentrun is the older build the BaseSuffix rows ran, if any.
	BaselineAgentrun string   `json:"baseline_agentrun,omitempty"`
	ScaleContenders  []string `json:"scale_contenders,omitempty"`
	ScaleLevels      []int    `json:"scale_levels,omitempty"`
	ScaleSpawns      int      `json:"scale_spawns_per_level"`
	RSSRuns          int      `json:"rss_runs"`
	CPURuns          int      `json:"cpu_runs"`
	IdleSessions     int      `json:"idle_sessions"`
}

// Report is everything one run produced.
type Report struct {
	Started    time.Time     `json:"started"`
	ElapsedS   float64       `json:"elapsed_s"`
	Machine    machine.Info  `json:"machine"`
	Config     Config        `json:"config"`
	Baseline   string        `json:"baseline"` // contender the "×bwrap" column divides by
	Floor      string        `json:"floor"`    // contender the "×fork+exec" column divides by
	Contenders []Contender   `json:"contenders"`
	Scaling    []ScalePoint  `json:"scaling,omitempty"`
	Idle       *IdleSessions `json:"idle_sessions,omitempty"`
	Notes      []string      `json:"notes,omitempty"`
}

// Find returns the contender with the given name, or nil.
func (r *Report) Find(name string) *Contender {
	for i := range r.Contenders {
		if r.Contenders[i].Name == name {
			return &r.Contenders[i]
		}
	}
	return nil
}

// ComputeRatios fills RatioBwrap and RatioFloor of every measured contender
// from the medians. A ratio is left nil when its baseline was not measured,
// so a missing bwrap shows as "—" rather than as a made-up number.
func (r *Report) ComputeRatios() {
	median := func(name string) (float64, bool) {
		c := r.Find(name)
		if c == nil || c.Status != StatusOK || c.Summary == nil {
			return 0, false
		}
		return c.Summary.P50, true
	}
	base, baseOK := median(r.Baseline)
	floor, floorOK := median(r.Floor)
	for i := range r.Contenders {
		c := &r.Contenders[i]
		c.RatioBwrap, c.RatioFloor = nil, nil
		if c.Status != StatusOK || c.Summary == nil {
			continue
		}
		if v, ok := stats.Ratio(c.Summary.P50, base); ok && baseOK {
			c.RatioBwrap = &v
		}
		if v, ok := stats.Ratio(c.Summary.P50, floor); ok && floorOK {
			c.RatioFloor = &v
		}
	}
}

// BaseSuffix marks a contender that runs the baseline build: "X@base" is X
// with the older binary, measured in the same rounds.
const BaseSuffix = "@base"

// BaseComparison returns, for every contender X measured beside an
// "X@base", one line comparing their ratios to bwrap: how the change
// between the two builds moved X, free of the drift between two runs.
// It needs ComputeRatios first.
func (r *Report) BaseComparison() []string {
	var out []string
	for _, c := range r.Contenders {
		b := r.Find(c.Name + BaseSuffix)
		if b == nil || c.RatioBwrap == nil || b.RatioBwrap == nil || *b.RatioBwrap == 0 {
			continue
		}
		rel := *c.RatioBwrap / *b.RatioBwrap
		out = append(out, fmt.Sprintf("%s is %.3f× %s and %s %.3f× in the same rounds: %.3f of the baseline build's ratio (%+.1f %%).",
			c.Name, *c.RatioBwrap, r.Baseline, b.Name, *b.RatioBwrap, rel, (rel-1)*100))
	}
	return out
}

// JSON writes the report as indented JSON.
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode report json: %w", err)
	}
	return nil
}

// Files names the outputs WriteFiles produces inside the output directory.
const (
	MarkdownFile = "latest.md"
	SVGFile      = "latest.svg"
	JSONFile     = "latest.json"
)

// WriteFiles writes latest.md, latest.svg and latest.json into dir. Each file
// is written to a temporary name and renamed, so a crash never leaves a
// half-written report beside a complete one.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output dir: %w", err)
	}
	outputs := []struct {
		name   string
		render func(io.Writer) error
	}{
		{MarkdownFile, func(w io.Writer) error { return r.Markdown(w, SVGFile) }},
		{SVGFile, r.SVG},
		{JSONFile, r.JSON},
	}
	var written []string
	for _, o := range outputs {
		path := filepath.Join(dir, o.name)
		if err := writeAtomic(path, o.render); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

func writeAtomic(path string, render func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	tmp := f.Name()
	if err := render(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("render %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return nil
}
