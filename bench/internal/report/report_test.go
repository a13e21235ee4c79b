package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/bench/internal/machine"
	"github.com/agentrun/agentrun/bench/internal/stats"
)

func summary(p50, p90, p99 float64) *stats.Summary {
	return &stats.Summary{N: 10, Min: p50 / 2, Max: p99, Mean: p50, Stddev: 0.1, P50: p50, P90: p90, P99: p99}
}

// sample builds a report with measured, missing, failed and unavailable
// contenders and a scaling section.
func sample() *Report {
	return &Report{
		Started:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		ElapsedS: 42,
		Machine: machine.Info{Kernel: "6.18.0", OS: "Debian", CPUModel: "Test <CPU> & co", NumCPU: 2, CgroupMode: "hybrid",
			GoVersion: "go1.26", Tools: map[string]string{"bwrap": "bubblewrap 0.8.0", "runc": "missing", "odd": "a|b"}},
		Config:   Config{Rounds: 200, Warmup: 3, Seed: 99},
		Baseline: "bwrap",
		Floor:    "fork+exec",
		Contenders: []Contender{
			{Name: "fork+exec", Label: "floor", Command: "/bin/true", Status: StatusOK, Summary: summary(1, 1.5, 2), MaxRSSKiB: 1024, CPUMS: 1.25},
			{Name: "bwrap", Label: "bubblewrap", Command: "bwrap --unshare-all /bin/true", Status: StatusOK, Summary: summary(4, 5, 8)},
			{Name: "agentrun-none", Label: "agentrun", Status: StatusOK, Summary: summary(2, 3, 4), Errors: 2, FirstError: "exit status 125"},
			{Name: "runc", Label: "runc", Status: StatusMissing, Reason: "runc not installed | pipe"},
			{Name: "agentrun-host", Label: "agentrun host", Status: StatusFailed, Reason: "warm-up run 1 failed: exit status 125"},
			{Name: "agentrun-api", Label: "in-process", Status: StatusUnavailable, Reason: "API does not exist yet"},
		},
		Scaling: []ScalePoint{
			{Contender: "bwrap", Concurrency: 1, Status: StatusOK, Spawns: 32, WallMS: 160, Throughput: 200, Latency: summary(5, 6, 7)},
			{Contender: "bwrap", Concurrency: 8, Status: StatusOK, Spawns: 32, WallMS: 100, Throughput: 320, Latency: summary(25, 30, 31)},
			{Contender: "agentrun-none", Concurrency: 1, Status: StatusMissing, Reason: "bin/agentrun not found"},
		},
		Notes: []string{"a note"},
	}
}

func TestComputeRatios(t *testing.T) {
	r := sample()
	r.ComputeRatios()
	check := func(name string, wantBwrap, wantFloor *float64) {
		t.Helper()
		c := r.Find(name)
		for _, x := range []struct {
			label     string
			got, want *float64
		}{{"bwrap", c.RatioBwrap, wantBwrap}, {"floor", c.RatioFloor, wantFloor}} {
			switch {
			case x.want == nil && x.got != nil:
				t.Errorf("%s ratio to %s = %v, want none", name, x.label, *x.got)
			case x.want != nil && (x.got == nil || *x.got != *x.want):
				t.Errorf("%s ratio to %s = %v, want %v", name, x.label, x.got, *x.want)
			}
		}
	}
	f := func(v float64) *float64 { return &v }
	check("agentrun-none", f(0.5), f(2))
	check("bwrap", f(1), f(4))
	check("fork+exec", f(0.25), f(1))
	check("runc", nil, nil)

	// Without a measured baseline the ratio is absent, not infinite.
	r.Find("bwrap").Status = StatusFailed
	r.ComputeRatios()
	check("agentrun-none", nil, f(2))
}

func TestTextListsEveryContenderAndReason(t *testing.T) {
	r := sample()
	r.ComputeRatios()
	var b bytes.Buffer
	if err := r.Text(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"fork+exec", "bwrap", "runc", "missing", "not yet available", "ok (2 errors)",
		"0.50×", "runc: missing — runc not installed | pipe",
		"agentrun-host: failed — warm-up run 1 failed",
		"agentrun-none: 2 timed runs failed (excluded), first: exit status 125",
		"agentrun-none (scaling): missing — bin/agentrun not found",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}

func TestMarkdown(t *testing.T) {
	r := sample()
	long := strings.Repeat("long note ", 40)
	r.Notes = append(r.Notes, long)
	r.ComputeRatios()
	var b bytes.Buffer
	if err := r.Markdown(&b, "latest.svg"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| contender | status | p50 ms | p90 ms | p99 ms | mean ms | stddev ms | n | ×bwrap | ×fork+exec | peak RSS | CPU ms |",
		"| agentrun-none | ok (2 errors) | 2.00 | 3.00 | 4.00 | 2.00 | 0.100 | 10 | 0.50× | 2.00× | — | — |",
		"| fork+exec | ok | 1.00 | 1.50 | 2.00 | 1.00 | 0.100 | 10 | 0.25× | 1.00× | 1.0 MiB | 1.25 |",
		"| runc | missing | — |",
		"- runc: missing — runc not installed | pipe",
		"| odd | a\\|b |", // pipes in cells are escaped
		"![p50 bars with p90 markers](latest.svg)",
		"| bwrap | 8 | ok | 32 | 320 | 25.0 | 30.0 | 31.0 |",
		"| cgroup mode | hybrid |",
		"| nproc | 2 |",
		"| bwrap | bubblewrap 0.8.0 |",
		"seed 99",
		"- a note",
		"- " + strings.TrimSpace(long) + "\n", // notes are never cut
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	// Every table row must have as many cells as its header.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| runc | missing | — |") || strings.HasPrefix(line, "| agentrun-api |") {
			if got := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|"); got != 13 {
				t.Errorf("row %q has %d separators, want 13", line, got)
			}
		}
	}
}

func TestSVGIsWellFormedAndLabelled(t *testing.T) {
	r := sample()
	r.ComputeRatios()
	var b bytes.Buffer
	if err := r.SVG(&b); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	var texts []string
	var rects, elements int
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("svg is not well-formed XML: %v\n%s", err, b.String())
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			elements++
			if tk.Name.Local == "rect" {
				rects++
			}
		case xml.CharData:
			texts = append(texts, string(tk))
		}
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"fork+exec", "agentrun-none", "missing — runc not installed", "Test <CPU> & co", "bwrap ×8", "p50 2.00 · p90 3.00 ms · 0.50× bwrap"} {
		if !strings.Contains(all, want) {
			t.Errorf("svg text lacks %q", want)
		}
	}
	// Background + 3 measured latency bars + 2 measured scaling bars.
	if rects != 6 {
		t.Errorf("svg has %d rects, want 6", rects)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	r := sample()
	r.ComputeRatios()
	var b bytes.Buffer
	if err := r.JSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	c := back.Find("agentrun-none")
	if c == nil || c.Summary == nil || c.Summary.P50 != 2 || c.RatioBwrap == nil || *c.RatioBwrap != 0.5 {
		t.Errorf("round trip lost data: %+v", c)
	}
	if back.Find("runc").Status != StatusMissing || back.Machine.CgroupMode != "hybrid" {
		t.Error("round trip lost status or machine")
	}
}

func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	written, err := sample().WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 3 {
		t.Fatalf("wrote %v", written)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != "latest.json,latest.md,latest.svg" {
		t.Errorf("directory holds %s (temporary files left?)", got)
	}
}

func TestFormatting(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{0.8734, "0.873"}, {4.4, "4.40"}, {25.04, "25.0"}, {123.4, "123"}} {
		if got := FormatMS(c.v); got != c.want {
			t.Errorf("FormatMS(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	if FormatRatio(nil) != "—" || FormatKiB(0) != "—" || FormatKiB(2048) != "2.0 MiB" {
		t.Error("absent values should render as —")
	}
	for _, c := range []struct{ span, want float64 }{{10, 2}, {45, 10}, {0.9, 0.2}, {300, 50}} {
		if got := NiceStep(c.span, 6); got != c.want {
			t.Errorf("NiceStep(%v) = %v, want %v", c.span, got, c.want)
		}
	}
}

func TestBaseComparison(t *testing.T) {
	r := sample()
	r.Contenders = append(r.Contenders,
		Contender{Name: "agentrun-none" + BaseSuffix, Label: "old build", Status: StatusOK, Summary: summary(2.5, 3, 4)},
		Contender{Name: "agentrun-host" + BaseSuffix, Label: "old build", Status: StatusOK, Summary: summary(2, 3, 4)})
	if got := r.BaseComparison(); got != nil {
		t.Errorf("before ComputeRatios: %q", got)
	}
	r.ComputeRatios()
	got := r.BaseComparison()
	// agentrun-host failed, so only agentrun-none has a pair: 0.5 against 0.625.
	if len(got) != 1 || !strings.Contains(got[0], "agentrun-none is 0.500× bwrap and agentrun-none@base 0.625×") ||
		!strings.Contains(got[0], "0.800 of the baseline build's ratio (-20.0 %)") {
		t.Errorf("comparison: %q", got)
	}
}
