package allocator

import "math"

// ReasonRelease marks a cut that frees a sibling's quota for a throttled
// member (releaseFor).
const ReasonRelease Reason = "release"

// releaseFor frees up to need µs for member k, throttled with a raise the
// pool cannot cover, from siblings whose demand of the last
// P.ReleasePeriods periods fell below their quota. The headroom floor
// keeps a quota above (1 + headroom) × the window's peak, so after a
// container's phase ends its quota stays up for a whole window (one
// second) while a sibling starting its own burst waits: the Escra paper's
// point (§VI-C) is that one app's budget serves a burst in one container
// from a sibling idle at that moment. The sibling whose recent demand fell
// furthest below its quota gives first, down to (1 + headroom) × its
// recent peak (never below the floor); a sibling throttled in those
// periods never gives. Σ quotas stay within Ω: this only cuts.
func (a *Books) releaseFor(k Key, need int64) []Decision {
	r := min(a.P.ReleasePeriods, a.P.Window)
	if r <= 0 || need <= 0 {
		return nil
	}
	floor := a.floorUs(len(a.order))
	var out []Decision
	for need > 0 {
		var best *Member
		var bestGap int64
		for _, j := range a.order {
			m := a.members[j]
			if j == k || m.fill < r || m.recentThrottled(r) {
				continue
			}
			recent := m.recentPeak(r)
			if 2*recent > m.PeakUsedUs() {
				continue // its phase has not ended: demand swings within it
			}
			keep := max(floor, int64(math.Ceil((1+a.P.Headroom)*float64(recent))))
			if gap := m.QuotaUs - keep; gap > bestGap {
				best, bestGap = m, gap
			}
		}
		if best == nil {
			break
		}
		cut := min(bestGap, need)
		need -= cut
		if d := a.decide(best, best.QuotaUs-cut, 0, ReasonRelease); d.Gen != 0 {
			out = append(out, d)
		}
	}
	return out
}

// recentPeak is the most the member used in one of its last r periods.
func (m *Member) recentPeak(r int) int64 {
	n := len(m.used)
	var p int64
	for i := 1; i <= min(r, m.fill); i++ {
		p = max(p, m.used[(m.pos-i+n)%n])
	}
	return p
}

// recentThrottled: the member was throttled in one of its last r periods.
func (m *Member) recentThrottled(r int) bool {
	n := len(m.th)
	for i := 1; i <= min(r, m.fill); i++ {
		if m.th[(m.pos-i+n)%n] {
			return true
		}
	}
	return false
}
