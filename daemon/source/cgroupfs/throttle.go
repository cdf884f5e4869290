package cgroupfs

import (
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// pollThrottle reads cpu.stat (and usage) of every hot watched group with
// a quota (see ThrottleHot) and appends a throttle event for each that is about to run out of
// quota in the CFS period in progress (ThrottleNear) or whose nr_throttled
// rose since the last poll without such an event for that CFS period; the
// caller sends them and flushes, so they leave at once. Groups without a
// quota cannot be throttled; a parent whose usage did not move since the
// last poll had no member run, so none was newly throttled.
func (c *Source) pollThrottle(parents []*parentGroup, out []pb.CpuStat, buf []byte) []pb.CpuStat {
	now := time.Now()
	for _, pg := range parents {
		if c.ThrottleHot > 0 && c.ThrottleWarm > 0 {
			c.warmUp(pg, now, buf)
		}
		if c.ThrottleHot > 0 && !pg.anyHot() {
			continue
		}
		if !c.NoParentShortcut && !pg.movedSincePoll(buf) {
			continue
		}
		for _, s := range pg.members {
			quota, periodUs := int64(-1), uint32(0)
			if c.Limits != nil {
				quota, periodUs = c.Limits(s.h)
			}
			if quota <= 0 || c.ThrottleHot > 0 && !s.hot {
				// A cold group takes a fresh baseline when it turns hot:
				// what it did unwatched is in its period records.
				s.evPrimed = false
				continue
			}
			s.pollReads++
			b, err := s.g.Read(cgroups.CPUStatFile, buf)
			if err != nil {
				continue
			}
			nr, ok := cgroups.KeyedValue(b, "nr_throttled")
			if !ok {
				continue
			}
			np, _ := cgroups.KeyedValue(b, "nr_periods")
			use, useOK := c.pollUsage(s, b, buf)
			if !s.evPrimed {
				s.evNr, s.evPeriods, s.evPrimed = nr, np, true
				s.cfsStart, s.cfsUse0, s.pollUse, s.cfsQuota, s.nearSent = now, use, use, quota, false
				continue
			}
			sentForEnded := s.nearSent
			period := time.Duration(periodUs) * time.Microsecond
			if period <= 0 {
				period = 100 * time.Millisecond
			}
			switch {
			case np > s.evPeriods: // the period timer fired since the last poll
				s.cfsStart, s.cfsUse0, s.nearSent = now.Add(-c.ThrottlePoll/2), s.pollUse, false
			case now.Sub(s.cfsStart) >= period+period/10:
				// Idle: the timer stopped and its grid moved on. The 10 %
				// margin keeps a busy group, whose nr_periods moves every
				// period, from being reset twice around one boundary.
				s.cfsStart = s.cfsStart.Add(now.Sub(s.cfsStart) / period * period)
				s.cfsUse0, s.nearSent = s.pollUse, false
				sentForEnded = false
			}
			if quota != s.cfsQuota { // a quota write refilled the runtime
				s.cfsUse0, s.nearSent = s.pollUse, false
			}
			rose := nr > s.evNr && !sentForEnded
			near := c.ThrottleNear > 0 && useOK && !s.nearSent && use >= s.cfsUse0 &&
				float64(use-s.cfsUse0)/1e3 >= c.ThrottleNear*float64(quota)
			s.evNr, s.evPeriods, s.pollUse, s.cfsQuota = nr, np, use, quota
			if near {
				s.nearSent = true
			}
			if !rose && !near {
				continue
			}
			// s.seq is the period_seq the period in progress will be
			// reported with (sample increments it after each record).
			out = append(out, pb.CpuStat{Handle: s.h, PeriodSeq: s.seq, QuotaUs: quota, NrThrottled: nr, MidPeriod: true})
		}
	}
	return out
}

// anyHot reports whether a member is polled at all: the parent's own read
// is skipped when none is.
func (pg *parentGroup) anyHot() bool {
	for _, s := range pg.members {
		if s.hot {
			return true
		}
	}
	return false
}

// markHot records whether the period just sampled makes s polled until
// the next: throttled, or usage (per sampling period) at least ThrottleHot
// of the quota per sampling period.
func (c *Source) markHot(s *sampled, throttled bool, usageUs uint64, quotaUs int64) {
	s.hot = quotaUs > 0 && (throttled || float64(usageUs) >= c.ThrottleHot*float64(quotaUs))
}
