// Package replay evaluates CPU limit policies offline on a profiling
// run's per-100 ms usage (profiles.json of bench-run): every static
// baseline's profiling rule and the real controller/allocator, each in a
// fluid model of the app's containers (fluid.go). It chooses budgets and
// tests allocator changes before a Docker run; it measures no latency.
package replay

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// SamplesPerSecond is the profiling run's sampling rate (100 ms samples).
const SamplesPerSecond = 10

// MinPeakCores is the smallest peak a profile reports, as the matrix does
// (a container idle in profiling still gets a usable limit).
const MinPeakCores = 0.05

// Peak1s is the ideal profile of one container: the largest 1 s sliding
// mean of its 100 ms usage (what second-granularity monitoring shows,
// Escra §VI-C), at least MinPeakCores.
func Peak1s(cpu []float64) float64 {
	pk := MinPeakCores
	for k := 0; k+SamplesPerSecond <= len(cpu); k++ {
		sum := 0.0
		for _, v := range cpu[k : k+SamplesPerSecond] {
			sum += v
		}
		pk = max(pk, sum/SamplesPerSecond)
	}
	return pk
}

// alignedMeans are the means of consecutive windows of w samples starting
// at the first (a monitoring pipeline's aligned buckets); a short tail is
// dropped unless there is no full window.
func alignedMeans(cpu []float64, w int) []float64 {
	var out []float64
	for k := 0; k+w <= len(cpu); k += w {
		sum := 0.0
		for _, v := range cpu[k : k+w] {
			sum += v
		}
		out = append(out, sum/float64(w))
	}
	if len(out) == 0 && len(cpu) > 0 {
		sum := 0.0
		for _, v := range cpu {
			sum += v
		}
		out = append(out, sum/float64(len(cpu)))
	}
	return out
}

// MonitorWindow is the bucket static15mon and vpastatic profile with: 10 s
// (a monitoring pipeline's scrape), 60 s for trace loads (their rate is
// reported per minute).
func MonitorWindow(load string) int {
	if strings.Contains(load, "trace") {
		return 60 * SamplesPerSecond
	}
	return 10 * SamplesPerSecond
}

// PeakAligned is the largest aligned mean over windows of w samples.
func PeakAligned(cpu []float64, w int) float64 {
	pk := MinPeakCores
	for _, m := range alignedMeans(cpu, w) {
		pk = max(pk, m)
	}
	return pk
}

// P90Aligned is the nearest-rank 90th percentile of the aligned means.
func P90Aligned(cpu []float64, w int) float64 {
	ms := alignedMeans(cpu, w)
	if len(ms) == 0 {
		return MinPeakCores
	}
	sort.Float64s(ms)
	i := max(0, int(math.Ceil(0.9*float64(len(ms))))-1)
	return max(MinPeakCores, ms[i])
}

// Rule is a static baseline's profiling rule: one container's limit in
// cores from its profiled 100 ms usage.
type Rule struct {
	Name string
	// How the limit is derived, as the report states it.
	Doc   string
	Limit func(cpu []float64, load string) float64
}

// Rules are the static baselines of the frontier benchmark.
var Rules = []Rule{
	{"static15", "1.5 × the peak of the 1 s sliding mean", func(c []float64, _ string) float64 { return 1.5 * Peak1s(c) }},
	{"static15mon", "1.5 × the peak of 10 s aligned means (60 s for trace loads), as a monitoring pipeline reports it",
		func(c []float64, l string) float64 { return 1.5 * PeakAligned(c, MonitorWindow(l)) }},
	{"vpastatic", "1.15 × the p90 of 10 s aligned means (60 s for trace loads), VPA's recommender rule applied once",
		func(c []float64, l string) float64 { return 1.15 * P90Aligned(c, MonitorWindow(l)) }},
}

// FrontierK are the multiples of the ideal profile (Peak1s) the frontier
// compares static limits and Escra budgets at.
var FrontierK = []float64{0.5, 0.75, 1.0, 1.5}

// StaticK is static at k × the ideal profile.
func StaticK(k float64) Rule {
	return Rule{Name: staticKName(k), Doc: "k × the peak of the 1 s sliding mean",
		Limit: func(c []float64, _ string) float64 { return k * Peak1s(c) }}
}

func staticKName(k float64) string { return fmt.Sprintf("static@%g", k) }
