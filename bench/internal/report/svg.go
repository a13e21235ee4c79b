package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// Chart geometry, in SVG user units (pixels).
const (
	svgWidth   = 980
	labelRight = 190 // right edge of the contender labels
	plotLeft   = 200
	plotWidth  = 540
	rowHeight  = 26
	barHeight  = 14
)

// NiceStep returns a "round" axis step (1, 2 or 5 times a power of ten) that
// divides span into at most about target intervals.
func NiceStep(span float64, target int) float64 {
	if span <= 0 || target <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return 1
	}
	raw := span / float64(target)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// barColor keeps agentrun visually apart from the peers.
func barColor(name string) string {
	switch {
	case strings.HasPrefix(name, "agentrun"):
		return "#d9480f"
	case name == "bwrap":
		return "#1c7ed6"
	case name == "fork+exec":
		return "#868e96"
	}
	return "#2b8a3e"
}

type svgBuf struct{ bytes.Buffer }

func (b *svgBuf) text(x, y float64, anchor, class, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" class="%s">`, x, y, anchor, class)
	_ = xml.EscapeText(b, []byte(s)) // writes to a bytes.Buffer cannot fail
	b.WriteString("</text>\n")
}

// axis draws vertical grid lines with labels under the plot, from top to
// bottom, for values 0..max, and returns the scale function.
func (b *svgBuf) axis(top, bottom, max float64, unit string) func(float64) float64 {
	step := NiceStep(max, 6)
	end := math.Ceil(max/step) * step
	if end <= 0 {
		end = 1
	}
	scale := func(v float64) float64 { return plotLeft + v/end*plotWidth }
	for v := 0.0; v <= end+step/2; v += step {
		x := scale(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="grid"/>`+"\n", x, top, x, bottom)
		b.text(x, bottom+14, "middle", "axis", trimFloat(v))
	}
	b.text(plotLeft+plotWidth/2, bottom+30, "middle", "axis", unit)
	return scale
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// SVG draws the chart: one bar per contender at its median with a whisker
// and tick at p90, then, when present, throughput bars per concurrency level.
func (r *Report) SVG(w io.Writer) error {
	var b svgBuf
	y := 30.0
	b.text(10, y, "start", "title", "Spawn latency of /bin/true — bar: p50, tick: p90 (lower is better)")
	y += 16
	b.text(10, y, "start", "sub", fmt.Sprintf("%s · %s · %d CPUs · cgroup %s · %d interleaved rounds",
		r.Machine.Kernel, r.Machine.CPUModel, r.Machine.NumCPU, r.Machine.CgroupMode, r.Config.Rounds))
	y += 20

	maxV := 0.0
	for _, c := range r.Contenders {
		if c.Summary != nil {
			maxV = math.Max(maxV, c.Summary.P90)
		}
	}
	top := y
	bottom := top + float64(len(r.Contenders))*rowHeight
	scale := b.axis(top, bottom, maxV, "milliseconds")
	for i, c := range r.Contenders {
		rowY := top + float64(i)*rowHeight
		mid := rowY + rowHeight/2
		b.text(labelRight, mid+4, "end", "label", c.Name)
		if c.Summary == nil {
			b.text(plotLeft+4, mid+4, "start", "na", fmt.Sprintf("%s — %s", c.Status, shorten(oneLine(c.Reason), 70)))
			continue
		}
		s := c.Summary
		x50, x90 := scale(s.P50), scale(s.P90)
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"><title>p50 %s ms</title></rect>`+"\n",
			plotLeft, mid-barHeight/2, math.Max(x50-plotLeft, 1), barHeight, barColor(c.Name), FormatMS(s.P50))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="whisker"/>`+"\n", x50, mid, x90, mid)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="p90"><title>p90 %s ms</title></line>`+"\n",
			x90, mid-barHeight/2-2, x90, mid+barHeight/2+2, FormatMS(s.P90))
		label := fmt.Sprintf("p50 %s · p90 %s ms", FormatMS(s.P50), FormatMS(s.P90))
		if c.RatioBwrap != nil {
			label += " · " + FormatRatio(c.RatioBwrap) + " " + r.Baseline
		}
		b.text(x90+6, mid+4, "start", "value", label)
	}
	y = bottom + 50

	if len(r.Scaling) > 0 {
		b.text(10, y, "start", "title", "Throughput under concurrency — spawns per second (higher is better)")
		y += 14
		maxT := 0.0
		for _, p := range r.Scaling {
			maxT = math.Max(maxT, p.Throughput)
		}
		top = y
		bottom = top + float64(len(r.Scaling))*rowHeight
		scale = b.axis(top, bottom, maxT, "spawns per second")
		for i, p := range r.Scaling {
			rowY := top + float64(i)*rowHeight
			mid := rowY + rowHeight/2
			b.text(labelRight, mid+4, "end", "label", fmt.Sprintf("%s ×%d", p.Contender, p.Concurrency))
			if p.Latency == nil {
				b.text(plotLeft+4, mid+4, "start", "na", fmt.Sprintf("%s — %s", p.Status, shorten(oneLine(p.Reason), 70)))
				continue
			}
			x := scale(p.Throughput)
			fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n",
				plotLeft, mid-barHeight/2, math.Max(x-plotLeft, 1), barHeight, barColor(p.Contender))
			b.text(x+6, mid+4, "start", "value", fmt.Sprintf("%.0f/s · p50 %s ms", p.Throughput, FormatMS(p.Latency.P50)))
		}
		y = bottom + 50
	}

	height := int(math.Ceil(y))
	var out bytes.Buffer
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n",
		svgWidth, height, svgWidth, height)
	out.WriteString(`<style>
.title{font-size:14px;font-weight:bold;fill:#212529}
.sub{font-size:11px;fill:#495057}
.label{font-size:12px;fill:#212529}
.value{font-size:11px;fill:#212529}
.axis{font-size:10px;fill:#868e96}
.na{font-size:11px;fill:#adb5bd;font-style:italic}
.grid{stroke:#e9ecef;stroke-width:1}
.whisker{stroke:#212529;stroke-width:1}
.p90{stroke:#212529;stroke-width:2}
</style>
`)
	fmt.Fprintf(&out, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)
	out.Write(b.Bytes())
	out.WriteString("</svg>\n")
	if _, err := w.Write(out.Bytes()); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	return nil
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
