package mu

import "math"

// The replayed window. Mu §3.3 and §4.1 replay a whole day of the trace
// (one minute per second: Table 3's 488,602 requests at 339 req/s are
// 1,440 s; Table 5's W1 221,026 at 154 req/s too), so their autoscalers
// meet the day's rises and falls. A run here replays a shorter window;
// the one chosen is the one with the most variation, so that what the
// day's changes ask of an autoscaler is in it. A window where the rate
// stands still cannot tell autoscalers apart.

// WindowRule names the rule for reports.
const WindowRule = "the window with the largest standard deviation of the per-minute counts (ties: more invocations, then earlier)"

// MostVariedWindow is the first minute (0-based) of the mins-minute
// window of counts whose per-minute counts have the largest standard
// deviation; among equal deviations (e.g. a constant function) the one
// with more invocations, then the earliest. It also returns that
// deviation. mins beyond the counts' length is the whole length.
func MostVariedWindow(counts []float64, mins int) (start int, sd float64) {
	mins = min(max(mins, 1), len(counts))
	if mins == 0 {
		return 0, 0
	}
	bestSD, bestSum := -1.0, -1.0
	for s := 0; s+mins <= len(counts); s++ {
		w := counts[s : s+mins]
		var sum float64
		for _, c := range w {
			sum += c
		}
		m := sum / float64(mins)
		var v float64
		for _, c := range w {
			v += (c - m) * (c - m)
		}
		d := math.Sqrt(v / float64(mins))
		// Compare at a relative tolerance so rounding does not decide.
		tol := 1e-9 * math.Max(1, math.Max(d, bestSD))
		if d > bestSD+tol || (math.Abs(d-bestSD) <= tol && sum > bestSum) {
			start, bestSD, bestSum = s, d, sum
		}
	}
	return start, bestSD
}

// PairWindow is MostVariedWindow over two functions' summed counts: the
// window in which the load the two put together on the shared cluster
// varies most, replayed for both on one clock as Mu §4.1 replays its two
// workloads over the same day.
func PairWindow(a, b AzureFunction, mins int) (start int, sd float64) {
	n := min(len(a.Counts), len(b.Counts))
	sum := make([]float64, n)
	for i := range sum {
		sum[i] = a.Counts[i] + b.Counts[i]
	}
	return MostVariedWindow(sum, mins)
}
