package cgroupfs

import (
	"math"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
)

// warmUp makes hot, between period samples, the cold members of pg that
// run at ThrottleHot of their quota or more since the last period sample:
// a container that jumps from idle into its quota is then watched within
// one ThrottleWarm instead of from its next period record. It reads the
// parent's usage first (one read for all its members, as parentGroup
// does for the period sample) and the members only when the parent used
// at least the smallest member's share since the period sample. The
// baselines are the period sample's (s.usageNs at s.at; pg.last at
// pg.lastAt), so a host pays one read per parent per check. A parent
// idle over the last period is not checked at all, and when every parent
// is, the poll does not run (sampleLoop): a burst out of a fully idle
// parent is answered by its first period record (Escra §IV-B's own
// reaction), one out of a parent where anything ran within ThrottleWarm.
func (c *Source) warmUp(pg *parentGroup, now time.Time, buf []byte) {
	if pg.quiet {
		return
	}
	bar := math.Inf(1) // the smallest cold member's hot rate (CPU ns per ns)
	for _, s := range pg.members {
		if r := c.hotRate(s); r > 0 && r < bar {
			bar = r
		}
	}
	if math.IsInf(bar, 1) {
		return
	}
	if !c.NoParentShortcut && pg.primed && !pg.lastAt.IsZero() {
		if u, ok := pg.usage(buf); ok {
			last := pg.last
			if pg.v2 {
				u, last = u*1000, last*1000
			}
			if el := now.Sub(pg.lastAt); u >= last && float64(u-last) < bar*float64(el) {
				return // no member can have used its share
			}
		}
	}
	for _, s := range pg.members {
		r := c.hotRate(s)
		if r <= 0 {
			continue
		}
		el := now.Sub(s.at)
		if el < time.Millisecond {
			continue // too short to tell a burst from a wake-up
		}
		use, ok := c.usageNow(s, buf)
		if ok && use > s.usageNs && float64(use-s.usageNs) >= r*float64(el) {
			s.hot = true
		}
	}
}

// hotRate is the CPU rate (ns per ns) at which cold member s turns hot:
// ThrottleHot of its quota per CFS period; 0 when s is hot already, has
// no baseline yet, or no quota.
func (c *Source) hotRate(s *sampled) float64 {
	if s.hot || !s.primed || c.Limits == nil {
		return 0
	}
	q, p := c.Limits(s.h)
	if q <= 0 {
		return 0
	}
	if p == 0 {
		p = 100000
	}
	return c.ThrottleHot * float64(q) / float64(p)
}

// usageNow is s's cumulative CPU time in ns, read now.
func (c *Source) usageNow(s *sampled, buf []byte) (uint64, bool) {
	s.warmReads++
	if s.g.Paths.Version == cgroups.V2 {
		b, err := s.g.Read(cgroups.CPUStatFile, buf)
		if err != nil {
			return 0, false
		}
		us, ok := cgroups.KeyedValue(b, "usage_usec")
		return us * 1000, ok
	}
	v, err := s.g.ReadInt(cgroups.CPUAcctUsage)
	if err != nil || v < 0 {
		return 0, false
	}
	return uint64(v), true
}

// hotCount is how many watched groups are hot.
func hotCount(parents []*parentGroup) int {
	n := 0
	for _, pg := range parents {
		for _, s := range pg.members {
			if s.hot {
				n++
			}
		}
	}
	return n
}

// anyAwake reports whether some parent was not idle over the last period.
func anyAwake(parents []*parentGroup) bool {
	for _, pg := range parents {
		if !pg.quiet {
			return true
		}
	}
	return false
}
