package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// latency summarises a set of durations.
type latency struct {
	N    int
	P50  time.Duration
	P99  time.Duration
	Max  time.Duration
	Mean time.Duration
}

// summarize sorts a copy of ds and reads its percentiles.
func summarize(ds []time.Duration) latency {
	if len(ds) == 0 {
		return latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return latency{N: len(s), P50: percentile(s, 50), P99: percentile(s, 99), Max: s[len(s)-1], Mean: sum / time.Duration(len(s))}
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// rate is count per second over d (0 if d is not positive).
func rate(count int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(count) / d.Seconds()
}

// fmtDur prints d with three significant digits: 850µs, 12.3ms, 1.23s.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + "µs"
	case d < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + "ms"
	case d < time.Hour:
		return sig3(d.Seconds()) + "s"
	default:
		return d.Round(time.Second).String()
	}
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// fmtInt prints n with thousands separators.
func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// fmtRate prints a rate: whole numbers with separators, small ones with
// decimals.
func fmtRate(v float64) string {
	if v < 100 {
		return sig3(v)
	}
	return fmtInt(int64(math.Round(v)))
}

// fmtBytes prints a size in MiB (or KiB for small ones).
func fmtBytes(b int64) string {
	switch {
	case b < 0:
		return "n/a"
	case b < 1<<20:
		return fmt.Sprintf("%dKB", b>>10)
	case b < 1<<30:
		return sig3(float64(b)/(1<<20)) + "MB"
	default:
		return sig3(float64(b)/(1<<30)) + "GB"
	}
}
