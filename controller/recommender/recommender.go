// Package recommender holds the baseline limit policies Escra is compared
// with in the benchmarks (Escra §VI-B to §VI-D): Static k×peak,
// an Autopilot-style moving-window recommender with a cost-based selector
// (Rzadca et al., EuroSys 2020) and a VPA-style decaying-histogram
// recommender (Kubernetes Vertical Pod Autoscaler). They are pure functions
// of the usage samples they are fed; the benchmark driver applies their
// limits through the same daemon fast path Escra uses, so only the policy
// differs.
package recommender

import (
	"strconv"
	"strings"
	"time"
)

// Sample is one usage observation of one container.
type Sample struct {
	T        time.Time
	CPU      float64 // cores used over the sample interval
	MemBytes float64 // memory usage (cgroup usage minus nothing: what the limit applies to)
}

// Limits is a recommendation. Zero in a field means "no recommendation".
type Limits struct {
	CPU      float64 // cores (quota/period)
	MemBytes float64
}

// Recommender turns usage samples into limits for one container.
type Recommender interface {
	// Name identifies the policy in results, e.g. "autopilot", "vpa60", "static15".
	Name() string
	// Observe feeds one sample; samples arrive in time order.
	Observe(s Sample)
	// ObserveOOM records that the container was OOM-killed at t while using memBytes.
	ObserveOOM(t time.Time, memBytes float64)
	// Recommend returns the limits to apply at now; ok is false while the
	// recommender has too little data to say anything.
	Recommend(now time.Time) (l Limits, ok bool)
	// Interval is how often the driver should call Recommend and apply.
	Interval() time.Duration
}

// Static recommends k × the peak measured in a profiling run (Escra §VI-B:
// k = 1.5, 1.0 and 0.75).
type Static struct {
	K       float64
	PeakCPU float64 // cores
	PeakMem float64 // bytes
	Label   string  // defaults to "static" + k*10, e.g. static15
}

func (s *Static) Name() string {
	if s.Label != "" {
		return s.Label
	}
	return staticName(s.K)
}

// staticName: 1.5 → static15, 1 → static10, 0.75 → static075.
func staticName(k float64) string {
	s := strconv.FormatFloat(k, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += "0"
	}
	return "static" + strings.ReplaceAll(s, ".", "")
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

func (s *Static) Observe(Sample)                {}
func (s *Static) ObserveOOM(time.Time, float64) {}
func (s *Static) Interval() time.Duration       { return 0 } // applied once at start
func (s *Static) Recommend(time.Time) (Limits, bool) {
	return Limits{CPU: s.K * s.PeakCPU, MemBytes: s.K * s.PeakMem}, s.PeakCPU > 0 || s.PeakMem > 0
}
