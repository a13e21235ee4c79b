package stats

import (
	"errors"
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentileInterpolates(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct{ p, want float64 }{
		{0, 1}, {50, 5.5}, {90, 9.1}, {99, 9.91}, {100, 10}, {25, 3.25},
		{-5, 1}, {150, 10}, // clamped
	}
	for _, c := range cases {
		if got := PercentileSorted(xs, c.p); !near(got, c.want) {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
}

func TestPercentileEdgeCases(t *testing.T) {
	if got := PercentileSorted(nil, 50); !math.IsNaN(got) {
		t.Errorf("empty: got %v, want NaN", got)
	}
	for _, p := range []float64{0, 50, 99, 100} {
		if got := PercentileSorted([]float64{7}, p); got != 7 {
			t.Errorf("single sample p%v = %v, want 7", p, got)
		}
	}
	if got := PercentileSorted([]float64{1, 3}, 50); got != 2 {
		t.Errorf("median of two = %v, want 2", got)
	}
}

func TestPercentileUnsortedLeavesInputAlone(t *testing.T) {
	xs := []float64{9, 1, 5, 3, 7}
	if got := Percentile(xs, 50); got != 5 {
		t.Errorf("median = %v, want 5", got)
	}
	if xs[0] != 9 || xs[4] != 7 {
		t.Errorf("input was reordered: %v", xs)
	}
}

func TestMeanStddev(t *testing.T) {
	mean, sd := MeanStddev([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if !near(mean, 5) {
		t.Errorf("mean = %v, want 5", mean)
	}
	if want := math.Sqrt(32.0 / 7); !near(sd, want) {
		t.Errorf("sample stddev = %v, want %v", sd, want)
	}
	if m, s := MeanStddev([]float64{3}); m != 3 || s != 0 {
		t.Errorf("single: %v, %v", m, s)
	}
	if m, s := MeanStddev(nil); !math.IsNaN(m) || !math.IsNaN(s) {
		t.Errorf("empty: %v, %v", m, s)
	}
}

func TestSummarize(t *testing.T) {
	s, err := Summarize([]float64{4, 1, 3, 2})
	if err != nil {
		t.Fatal(err)
	}
	if s.N != 4 || s.Min != 1 || s.Max != 4 || !near(s.Mean, 2.5) || !near(s.P50, 2.5) {
		t.Errorf("summary = %+v", s)
	}
	if !near(s.P90, 3.7) || !near(s.P99, 3.97) {
		t.Errorf("p90/p99 = %v/%v, want 3.7/3.97", s.P90, s.P99)
	}
	if _, err := Summarize(nil); !errors.Is(err, ErrNoSamples) {
		t.Errorf("empty: err = %v, want ErrNoSamples", err)
	}
}

func TestRatio(t *testing.T) {
	if r, ok := Ratio(3, 6); !ok || r != 0.5 {
		t.Errorf("3/6 = %v, %v", r, ok)
	}
	for _, c := range []struct{ a, b float64 }{
		{1, 0}, {1, -1}, {math.NaN(), 1}, {1, math.NaN()}, {math.Inf(1), 1}, {1, math.Inf(1)},
	} {
		if _, ok := Ratio(c.a, c.b); ok {
			t.Errorf("Ratio(%v, %v) should be absent", c.a, c.b)
		}
	}
}

func TestIntHelpers(t *testing.T) {
	if got := MedianInt64([]int64{5, 1, 3}); got != 3 {
		t.Errorf("median odd = %d", got)
	}
	if got := MedianInt64([]int64{4, 1, 3, 2}); got != 2 {
		t.Errorf("median even = %d, want lower middle 2", got)
	}
	if MedianInt64(nil) != 0 || MaxInt64(nil) != 0 {
		t.Error("empty should be 0")
	}
	if got := MaxInt64([]int64{-3, -1, -2}); got != -1 {
		t.Errorf("max = %d", got)
	}
}
