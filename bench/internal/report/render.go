package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// FormatMS prints milliseconds with about three significant digits, enough
// to compare contenders without pretending to microsecond precision.
func FormatMS(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// FormatRatio prints a ratio as "0.62×", or "—" when absent.
func FormatRatio(r *float64) string {
	if r == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f×", *r)
}

// FormatKiB prints a KiB count in MiB, or "—" for zero (not measured).
func FormatKiB(k int64) string {
	if k <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f MiB", float64(k)/1024)
}

// FormatCPU prints a CPU time per spawn in ms, or "—" for zero (not
// measured, or lost in the background's noise).
func FormatCPU(ms float64) string {
	if ms <= 0 {
		return "—"
	}
	return FormatMS(ms)
}

func statusCell(c *Contender) string {
	if c.Status == StatusOK && c.Errors > 0 {
		return fmt.Sprintf("ok (%d errors)", c.Errors)
	}
	return string(c.Status)
}

// Text writes the terminal summary: the latency table, the scaling table and
// the reasons for every contender that was not measured.
func (r *Report) Text(w io.Writer) error {
	bw := bufio.NewWriter(w)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tstatus\tp50 ms\tp90 ms\tp99 ms\tmean ms\tstddev\tn\t×bwrap\t×fork+exec\tpeak RSS\tCPU ms\t")
	for i := range r.Contenders {
		c := &r.Contenders[i]
		if c.Summary == nil {
			fmt.Fprintf(tw, "%s\t%s\t—\t—\t—\t—\t—\t0\t—\t—\t—\t—\t\n", c.Name, statusCell(c))
			continue
		}
		s := c.Summary
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", c.Name, statusCell(c),
			FormatMS(s.P50), FormatMS(s.P90), FormatMS(s.P99), FormatMS(s.Mean), FormatMS(s.Stddev), s.N,
			FormatRatio(c.RatioBwrap), FormatRatio(c.RatioFloor), FormatKiB(c.MaxRSSKiB), FormatCPU(c.CPUMS))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("render text table: %w", err)
	}
	if len(r.Scaling) > 0 {
		fmt.Fprintln(bw)
		tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "scaling\tconcurrency\tstatus\tspawns\tspawns/s\tp50 ms\tp90 ms\tp99 ms\t")
		for _, p := range r.Scaling {
			if p.Latency == nil {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t—\t—\t—\t—\t\n", p.Contender, p.Concurrency, p.Status, p.Spawns)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.0f\t%s\t%s\t%s\t\n", p.Contender, p.Concurrency, scaleStatus(p), p.Spawns,
				p.Throughput, FormatMS(p.Latency.P50), FormatMS(p.Latency.P90), FormatMS(p.Latency.P99))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("render scaling table: %w", err)
		}
	}
	if l := r.idleLine(); l != "" {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, l)
	}
	if lines := r.unmeasured(); len(lines) > 0 {
		fmt.Fprintln(bw)
		for _, l := range lines {
			fmt.Fprintln(bw, l)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write text report: %w", err)
	}
	return nil
}

// idleLine sums up the idle sessions' memory in one line, "" when they
// were not measured.
func (r *Report) idleLine() string {
	s := r.Idle
	switch {
	case s == nil:
		return ""
	case s.Status != StatusOK:
		return fmt.Sprintf("idle sessions: %s — %s", s.Status, oneLine(s.Reason))
	case s.Sessions == 0:
		return ""
	}
	n := float64(s.Sessions)
	return fmt.Sprintf("idle sessions: %d made in %.1f s; per session (holder + init) %.2f MiB PSS (holder %.2f), %.2f MiB RSS, %.2f MiB anonymous; MemAvailable fell by %.0f MiB in all",
		s.Sessions, s.CreateWallMS/1000, float64(s.PSSKiB)/n/1024, float64(s.HolderPSSKiB)/n/1024, float64(s.RSSKiB)/n/1024, float64(s.AnonKiB)/n/1024, float64(s.MemAvailableDropKiB)/1024)
}

func scaleStatus(p ScalePoint) string {
	if p.Status == StatusOK && p.Errors > 0 {
		return fmt.Sprintf("ok (%d errors)", p.Errors)
	}
	return string(p.Status)
}

// unmeasured lists "name: status — reason" for every contender (and scaling
// contender) that has no numbers, plus timed-run errors of measured ones.
func (r *Report) unmeasured() []string {
	var out []string
	for _, c := range r.Contenders {
		switch {
		case c.Status != StatusOK:
			out = append(out, fmt.Sprintf("%s: %s — %s", c.Name, c.Status, oneLine(c.Reason)))
		case c.Errors > 0:
			out = append(out, fmt.Sprintf("%s: %d timed runs failed (excluded), first: %s", c.Name, c.Errors, oneLine(c.FirstError)))
		}
	}
	seen := map[string]bool{}
	for _, p := range r.Scaling {
		// A reason already listed for the latency run is not repeated.
		if c := r.Find(p.Contender); p.Status != StatusOK && !seen[p.Contender] && (c == nil || c.Status != p.Status) {
			seen[p.Contender] = true
			out = append(out, fmt.Sprintf("%s (scaling): %s — %s", p.Contender, p.Status, oneLine(p.Reason)))
		}
	}
	return out
}

// flatten joins s onto one line.
func flatten(s string) string { return strings.Join(strings.Fields(s), " ") }

// oneLine flattens a reason or error message and caps its length, since it
// may carry a tool's whole stderr.
func oneLine(s string) string {
	s = flatten(s)
	if s == "" {
		return "no reason recorded"
	}
	const max = 300
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// mdCell escapes a string for a markdown table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(oneLine(s), "|", `\|`), "`", "'")
}

// Markdown writes the report; svgName is the chart file linked from it.
func (r *Report) Markdown(w io.Writer, svgName string) error {
	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }

	p("# Spawn latency: agentrun and its peers\n\n")
	p("One spawn of `/bin/true`, measured from `fork` in the driver to `wait4` returning. ")
	p("%d rounds; each round runs every contender once in a freshly shuffled order (seed %d), after %d warm-up run(s) each. ",
		r.Config.Rounds, r.Config.Seed, r.Config.Warmup)
	p("Generated %s in %.0f s.", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.ElapsedS)
	if r.Config.Quick {
		p(" **Quick run: fewer samples, treat p99 as noise.**")
	}
	if len(r.Config.Only) > 0 {
		p(" Only: %s.", strings.Join(r.Config.Only, ", "))
	}
	p("\n\n")

	p("| contender | status | p50 ms | p90 ms | p99 ms | mean ms | stddev ms | n | ×%s | ×%s | peak RSS | CPU ms |\n", r.Baseline, r.Floor)
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for i := range r.Contenders {
		c := &r.Contenders[i]
		if c.Summary == nil {
			p("| %s | %s | — | — | — | — | — | 0 | — | — | — | — |\n", mdCell(c.Name), mdCell(statusCell(c)))
			continue
		}
		s := c.Summary
		p("| %s | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s |\n", mdCell(c.Name), mdCell(statusCell(c)),
			FormatMS(s.P50), FormatMS(s.P90), FormatMS(s.P99), FormatMS(s.Mean), FormatMS(s.Stddev), s.N,
			FormatRatio(c.RatioBwrap), FormatRatio(c.RatioFloor), FormatKiB(c.MaxRSSKiB), FormatCPU(c.CPUMS))
	}
	p("\n")
	if svgName != "" {
		p("![p50 bars with p90 markers](%s)\n\n", svgName)
	}
	if lines := r.unmeasured(); len(lines) > 0 {
		p("Not measured or with errors:\n\n")
		for _, l := range lines {
			p("- %s\n", strings.ReplaceAll(l, "\n", " "))
		}
		p("\n")
	}

	if len(r.Scaling) > 0 {
		p("## Scaling\n\n")
		p("N workers spawn concurrently until the level's budget is spent; batches of the contenders alternate in shuffled order. ")
		p("Throughput is successful spawns divided by wall time; latency is per spawn. ")
		p("Peak RSS per spawn does not depend on concurrency and is in the latency table.\n\n")
		p("| contender | concurrency | status | spawns | spawns/s | p50 ms | p90 ms | p99 ms |\n")
		p("|---|--:|---|--:|--:|--:|--:|--:|\n")
		for _, s := range r.Scaling {
			if s.Latency == nil {
				p("| %s | %d | %s | %d | — | — | — | — |\n", mdCell(s.Contender), s.Concurrency, mdCell(string(s.Status)), s.Spawns)
				continue
			}
			p("| %s | %d | %s | %d | %.0f | %s | %s | %s |\n", mdCell(s.Contender), s.Concurrency, mdCell(scaleStatus(s)),
				s.Spawns, s.Throughput, FormatMS(s.Latency.P50), FormatMS(s.Latency.P90), FormatMS(s.Latency.P99))
		}
		p("\n")
	}

	if l := r.idleLine(); l != "" {
		p("## Idle sessions\n\n")
		p("Sessions made one after another with `agentrun create` and left idle, each a holder process and an init; PSS shares the pages the processes share (the binary's), so the total counts them once.\n\n")
		p("%s\n\n", l)
	}

	p("## Contenders\n\n")
	for _, c := range r.Contenders {
		p("- **%s** — %s", c.Name, flatten(c.Label))
		if c.Command != "" {
			p(": `%s`", strings.ReplaceAll(c.Command, "`", "'"))
		}
		p("\n")
	}
	p("\n")

	m := r.Machine
	p("## Machine\n\n")
	p("| | |\n|---|---|\n")
	p("| kernel | %s |\n", mdCell(m.Kernel))
	p("| OS | %s |\n", mdCell(m.OS))
	p("| CPU | %s |\n", mdCell(m.CPUModel))
	p("| nproc | %d |\n", m.NumCPU)
	if m.MemTotal != "" {
		p("| memory | %s |\n", mdCell(m.MemTotal))
	}
	p("| cgroup mode | %s |\n", mdCell(m.CgroupMode))
	p("| Go | %s |\n", mdCell(m.GoVersion))
	if m.LoadStart != "" || m.LoadEnd != "" {
		p("| load average (start → end) | %s → %s |\n", mdCell(m.LoadStart), mdCell(m.LoadEnd))
	}
	tools := make([]string, 0, len(m.Tools))
	for k := range m.Tools {
		tools = append(tools, k)
	}
	sort.Strings(tools)
	for _, k := range tools {
		p("| %s | %s |\n", mdCell(k), mdCell(m.Tools[k]))
	}
	p("\n")
	if len(r.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", flatten(n))
		}
		p("\n")
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write markdown report: %w", err)
	}
	return nil
}
