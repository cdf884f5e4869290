// Package hist is a lock-free latency histogram with 1 µs buckets up to
// 65 ms, enough for exact p50/p99 of sub-millisecond decisions.
package hist

import (
	"sync/atomic"
	"time"
)

const buckets = 1 << 16

// H counts durations in microsecond buckets; the last bucket is overflow.
type H struct {
	b     [buckets]atomic.Uint64
	n     atomic.Uint64
	sumUs atomic.Uint64
}

// Observe adds one duration.
func (h *H) Observe(d time.Duration) {
	us := max(d.Microseconds(), 0)
	h.sumUs.Add(uint64(us))
	h.b[min(us, buckets-1)].Add(1)
	h.n.Add(1)
}

// Count is the number of observations.
func (h *H) Count() uint64 { return h.n.Load() }

// Quantile returns the q-quantile in microseconds (0 when empty).
func (h *H) Quantile(q float64) int64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q * float64(n))
	if rank >= n {
		rank = n - 1
	}
	var c uint64
	for i := range h.b {
		c += h.b[i].Load()
		if c > rank {
			return int64(i)
		}
	}
	return buckets - 1
}

// MeanUs is the mean in microseconds.
func (h *H) MeanUs() float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return float64(h.sumUs.Load()) / float64(n)
}

// Reset empties the histogram (benchmarks drop their warm-up).
func (h *H) Reset() {
	for i := range h.b {
		h.b[i].Store(0)
	}
	h.n.Store(0)
	h.sumUs.Store(0)
}
