// Package stats summarises latency samples for the spawn benchmark:
// percentiles, mean, standard deviation and ratios between medians.
//
// Everything here is pure arithmetic on float64 milliseconds so that it can be
// tested exactly, with no clocks involved.
package stats

import (
	"errors"
	"math"
	"sort"
)

// ErrNoSamples is returned when a summary is asked of an empty sample set.
var ErrNoSamples = errors.New("stats: no samples")

// Summary describes one sample set. All values are in the samples' unit
// (milliseconds throughout the benchmark).
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
}

// Summarize computes a Summary. The input is not modified.
func Summarize(samples []float64) (Summary, error) {
	if len(samples) == 0 {
		return Summary{}, ErrNoSamples
	}
	sorted := append([]float64(nil), samples...)
	sort.Float64s(sorted)
	mean, sd := MeanStddev(sorted)
	return Summary{
		N:      len(sorted),
		Min:    sorted[0],
		Max:    sorted[len(sorted)-1],
		Mean:   mean,
		Stddev: sd,
		P50:    PercentileSorted(sorted, 50),
		P90:    PercentileSorted(sorted, 90),
		P99:    PercentileSorted(sorted, 99),
	}, nil
}

// PercentileSorted returns the p-th percentile (0..100) of ascending samples,
// interpolating linearly between the two closest ranks (the "R-7" definition
// used by numpy and spreadsheets), so the median of an even-sized set is the
// mean of its two middle values. It returns NaN for an empty set; p is
// clamped to [0, 100].
func PercentileSorted(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	p = math.Max(0, math.Min(100, p))
	rank := p / 100 * float64(n-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	if lo == hi {
		return sorted[lo]
	}
	frac := rank - float64(lo)
	return sorted[lo] + frac*(sorted[hi]-sorted[lo])
}

// Percentile is PercentileSorted for unsorted input; it sorts a copy.
func Percentile(samples []float64, p float64) float64 {
	sorted := append([]float64(nil), samples...)
	sort.Float64s(sorted)
	return PercentileSorted(sorted, p)
}

// MeanStddev returns the arithmetic mean and the sample standard deviation
// (n-1 denominator; 0 for a single sample).
func MeanStddev(samples []float64) (mean, stddev float64) {
	n := len(samples)
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	var sum float64
	for _, s := range samples {
		sum += s
	}
	mean = sum / float64(n)
	if n == 1 {
		return mean, 0
	}
	var sq float64
	for _, s := range samples {
		d := s - mean
		sq += d * d
	}
	return mean, math.Sqrt(sq / float64(n-1))
}

// Ratio returns a/b and whether it is meaningful: a ratio to a missing,
// zero or non-finite baseline is reported as absent rather than as Inf.
func Ratio(a, b float64) (float64, bool) {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0, false
	}
	return a / b, true
}

// MedianInt64 returns the median of integer samples (lower middle for even
// counts, so the result is always an observed value), or 0 for none.
func MedianInt64(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]int64(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)/2]
}

// MaxInt64 returns the largest value, or 0 for none.
func MaxInt64(xs []int64) int64 {
	var m int64
	for i, x := range xs {
		if i == 0 || x > m {
			m = x
		}
	}
	return m
}
