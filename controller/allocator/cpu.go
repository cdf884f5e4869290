package allocator

import (
	"errors"
	"math"
)

// Stat is one container's CFS period (Escra §IV-B), already validated
// by the ingest.
type Stat struct {
	Seq       uint64
	QuotaUs   int64 // quota in force during the period (-1: unlimited)
	PeriodUs  int64
	UnusedUs  int64
	Throttled bool
	UsageUs   int64
}

var (
	ErrStale  = errors.New("allocator: duplicate or reordered period")
	ErrAbsurd = errors.New("allocator: absurd statistic")
)

// maxGapFill bounds how many missing periods are replayed into the window.
const maxGapFill = 1 << 16

// CPU consumes one period's statistic and returns the decision for the
// next period, if the quota changes (§IV-D-1). Gaps in Seq are periods
// without a record: the kernel backend stops an idle group's period timer,
// so they count as unthrottled, fully unused periods.
func (a *Books) CPU(k Key, s Stat) (Decision, error) {
	m := a.members[k]
	if m == nil {
		return Decision{}, ErrUnknown
	}
	if s.PeriodUs <= 0 || s.UnusedUs < 0 || s.QuotaUs < -1 || s.UsageUs < 0 ||
		s.PeriodUs > 1_000_000 || s.UnusedUs > 1_000_000_000 || s.QuotaUs > 1_000_000_000 {
		return Decision{}, ErrAbsurd
	}
	if m.seen && s.Seq <= m.lastSeq {
		return Decision{}, ErrStale
	}
	pUs := a.P.PeriodUs()
	// Normalise to the allocator's period when the daemon's differs.
	unused := s.UnusedUs
	if s.PeriodUs != pUs {
		unused = unused * pUs / s.PeriodUs
	}
	if s.QuotaUs > 0 {
		unused = min(unused, s.QuotaUs*pUs/s.PeriodUs)
	}
	unused = min(unused, m.QuotaUs) // measured against the quota we assigned
	decay := a.peakDecay()
	if m.seen {
		gap := min(s.Seq-m.lastSeq-1, uint64(len(m.th)), maxGapFill)
		for range gap {
			m.push(false, m.QuotaUs, 0)
			m.decayPeak *= decay
		}
	}
	used := s.UsageUs
	if s.PeriodUs != pUs {
		used = used * pUs / s.PeriodUs
	}
	used = min(used, m.HostMaxUs)
	m.decayPeak = max(float64(used), m.decayPeak*decay)
	m.seen, m.lastSeq = true, s.Seq
	m.push(s.Throttled, unused, used)
	m.Periods++
	if s.Throttled {
		m.Throttles++
	}
	m.LastUsageUs = s.UsageUs
	if m.wantQuota > 0 && m.Periods >= uint64(len(m.th)) {
		m.wantQuota = 0 // a full window: the policy decides from here
	}
	if m.QuotaUs <= 0 {
		return Decision{}, nil // not assigned yet
	}
	in := CPUInput{Key: k, P: a.P, QuotaUs: m.QuotaUs, UnusedUs: unused, Throttled: s.Throttled,
		AvgThrottle: m.AvgThrottle(), AvgUnusedUs: m.AvgUnusedUs(), PeakUsedUs: m.PeakUsedUs(),
		DecayedPeakUs: int64(m.decayPeak), UnallocatedUs: a.CPUUnallocatedUs(), Members: len(a.order),
		RaisedInPeriod: m.raisedSeq == s.Seq+1}
	q, r := a.Policy.NextQuota(in)
	q = a.clampQuota(m, q)
	if d := q - m.QuotaUs; d < a.P.MinStepUs && -d < a.P.MinStepUs && m.QuotaUs >= a.floorUs(len(a.order)) {
		return Decision{}, nil
	}
	return a.decide(m, q, 0, r), nil
}

// Throttle handles a throttle event: member k ran out of quota in the
// middle of period seq (the period its next statistic will report). The
// policy may raise the quota at once; a scale-down of k is never taken
// here. An event for a period whose statistic already arrived is stale.
//
// With P.FairShareOnThrottle, a member below its equal share Ω/λ that the
// pool cannot lift to Ω/λ takes the rest from members above Ω/λ, down to
// Ω/λ (takeCPU), even when the policy's own raise would fit the pool: a
// doubling from a few ms takes periods to reach what a sibling that burst
// before it holds (Escra §VI-C, containers that peak apart). The cuts
// come first in the result, and under AckGated the raise beyond the pool
// follows their acknowledgements (wantQuota, Redistribute). So a
// throttled container can always reach what an equal static split would
// give it, as a sibling that hoards its last peak's quota no longer
// leaves it throttled to the period's end.
// Only members below Ω/λ take and only members above it give: no cycle.
func (a *Books) Throttle(k Key, seq uint64) ([]Decision, error) {
	m := a.members[k]
	if m == nil {
		return nil, ErrUnknown
	}
	if m.seen && seq <= m.lastSeq {
		return nil, ErrStale
	}
	m.ThrottleEvents++
	if m.QuotaUs <= 0 {
		return nil, nil
	}
	in := CPUInput{Key: k, P: a.P, QuotaUs: m.QuotaUs, Throttled: true,
		AvgThrottle: m.AvgThrottle(), AvgUnusedUs: m.AvgUnusedUs(), PeakUsedUs: m.PeakUsedUs(),
		DecayedPeakUs: int64(m.decayPeak), UnallocatedUs: a.CPUUnallocatedUs(), Members: len(a.order)}
	want, r := a.Policy.OnThrottle(in)
	if want <= m.QuotaUs {
		return nil, nil
	}
	var out []Decision
	if fair := min(a.omegaUs/int64(len(a.order)), m.HostMaxUs); a.P.FairShareOnThrottle && m.QuotaUs < fair &&
		!a.HoldRaises && m.QuotaUs+a.CPUUnallocatedUs() < fair {
		target := fair // what an equal split gives; one round trip, not a doubling per event
		if need := target - m.QuotaUs - a.targetFreeUs(); need > 0 {
			out = a.takeCPU(need, fair)
		}
		if a.AckGated {
			m.wantQuota = max(m.wantQuota, target)
		} else {
			want = max(want, target)
		}
	}
	if short := min(want, m.HostMaxUs) - m.QuotaUs - a.targetFreeUs(); short > 0 && !a.HoldRaises {
		if rel := a.releaseFor(k, short); len(rel) > 0 {
			out = append(out, rel...)
			if a.AckGated { // the raise follows the cuts' acknowledgements
				m.wantQuota = max(m.wantQuota, min(want, m.QuotaUs+a.targetFreeUs()))
			}
		}
	}
	q := a.clampQuota(m, want)
	if q-m.QuotaUs < a.P.MinStepUs {
		return out, nil
	}
	m.raisedSeq = seq + 1
	if d := a.decide(m, q, 0, r); d.Gen != 0 {
		out = append(out, d)
	}
	return out, nil
}

// peakDecay is the per-period factor 2^(−P/half-life) of the decaying
// peak (0 when the half-life is 0: only the window's peak counts).
func (a *Books) peakDecay() float64 {
	if a.P.PeakHalfLife <= 0 {
		return 0
	}
	return math.Exp2(-float64(a.P.Period) / float64(a.P.PeakHalfLife))
}

// clampQuota enforces floor ≤ q ≤ host max and Σ ≤ Ω (a raise comes only
// from the unallocated pool).
func (a *Books) clampQuota(m *Member, q int64) int64 {
	if q > m.QuotaUs {
		q = a.raiseRoomUs(m, min(q, m.QuotaUs+a.CPUUnallocatedUs()))
	}
	q = min(q, m.HostMaxUs)
	floor := a.floorUs(len(a.order))
	if q < floor {
		// Raise to the floor only from the pool; never push Σ over Ω.
		q = min(floor, max(q, m.QuotaUs+a.CPUUnallocatedUs()))
	}
	if a.HoldRaises {
		q = min(q, m.QuotaUs)
	}
	return q
}
