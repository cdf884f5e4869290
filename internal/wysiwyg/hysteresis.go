package wysiwyg

import "time"

// Hysteresis decides the allocation a C1 container's cpuset is laid out
// for while its quota moves every period (Escra's controller; the WYSIWYG paper
// sized it once). A raise is laid out at once: the container must never
// see fewer cores than its quota needs. A cut that keeps the layout's
// shape (the same whole cores, the fraction on the same core) is done in
// place, only the quota moves. A cut that would change the cpuset waits
// until the quota has stayed below the layout for Hold, and, when it
// drops a core, Band millicores below that core, so a quota wavering
// around a whole number does not move cpusets every period. Meanwhile the
// container sees one core more than ⌈quota⌉ (never fewer).
type Hysteresis struct {
	Hold time.Duration // default 1 s (10 periods)
	Band int64         // millicores, default 50

	since time.Time // the quota first asked for a smaller layout
}

// DefaultHold and DefaultBand are the hysteresis defaults (ours: the WYSIWYG paper
// resizes nothing).
const (
	DefaultHold = time.Second
	DefaultBand = 50
)

// Target returns the allocation to lay out for quota q (millicores) when
// the layout is for cur.
func (h *Hysteresis) Target(cur, q int64, now time.Time) int64 {
	hold, band := h.Hold, h.Band
	if hold <= 0 {
		hold = DefaultHold
	}
	if band <= 0 {
		band = DefaultBand
	}
	if q >= cur || sameShape(cur, q) {
		h.since = time.Time{}
		return q
	}
	k := (cur + Milli - 1) / Milli
	if (q+Milli-1)/Milli < k && q > (k-1)*Milli-band {
		h.since = time.Time{} // inside the band: keep the cores
		return cur
	}
	if h.since.IsZero() {
		h.since = now
	}
	if now.Sub(h.since) < hold {
		return cur
	}
	h.since = time.Time{}
	return q
}

// sameShape: the same whole cores and both with or both without a fraction.
func sameShape(a, b int64) bool {
	return a/Milli == b/Milli && (a%Milli == 0) == (b%Milli == 0)
}
