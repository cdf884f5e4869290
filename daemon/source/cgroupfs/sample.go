package cgroupfs

import (
	"context"
	"runtime"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/internal/wallclock"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// sampleLoop samples every period and, between periods, watches for
// throttle events, until ctx ends.
func (c *Source) sampleLoop(ctx context.Context, sink source.Sink) error {
	period := c.Period
	if period <= 0 {
		period = 100 * time.Millisecond
	}
	t := time.NewTimer(wallclock.Until(time.Now(), period))
	defer t.Stop()
	// The throttle watcher runs on this goroutine, between period samples:
	// it reads the period state (seq) without a lock and the sink, which is
	// not safe for concurrent use, stays single-threaded.
	// The poll timer runs every ThrottlePoll only while some group is hot
	// (see ThrottleHot), else every ThrottleWarm to look for a group
	// turning hot (warmUp): an idle escrad should not read every group
	// 100 times a second for nothing (at 100 idle containers that was
	// 2.4 % of a core).
	var parents []*parentGroup
	var poll <-chan time.Time
	var pt *time.Timer
	polling := c.ThrottlePoll > 0 && c.ThrottlePoll < period
	// interval is the poll's: ThrottlePoll while a group is hot, else
	// ThrottleWarm (0: stopped).
	// ThrottleWarm (0: stopped), and only while some parent was not idle
	// the last period: on a host where nothing ran, nothing wakes.
	interval := func(hot int) time.Duration {
		switch {
		case !polling:
			return 0
		case hot > 0 || c.ThrottleHot <= 0:
			return c.ThrottlePoll
		case c.ThrottleWarm > 0 && c.ThrottleWarm < period && anyAwake(parents):
			return max(c.ThrottleWarm, c.ThrottlePoll)
		}
		return 0
	}
	armPoll := func(hot int) {
		iv := interval(hot)
		switch {
		case iv == 0:
			if pt != nil {
				pt.Stop()
			}
			poll = nil
		case pt == nil:
			pt = time.NewTimer(iv)
			poll = pt.C
		default:
			pt.Reset(iv)
			poll = pt.C
		}
	}
	defer func() {
		if pt != nil {
			pt.Stop()
		}
	}()
	var st pb.CpuStat
	var events []pb.CpuStat
	buf := make([]byte, 512)
	byDir := map[string]*parentGroup{}
	defer func() {
		for _, pg := range byDir {
			pg.close()
		}
	}()
	refresh := func() {
		c.mu.Lock()
		if c.dirty {
			parents = c.regroup(byDir, parents[:0])
			c.dirty = false
		}
		c.mu.Unlock()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poll:
			// The reads happen under mu, after a regroup: Unwatch waits
			// for them, so its caller may close the group as soon as it
			// returns (500 polls a second would otherwise hit that
			// window). The events are sent after unlocking.
			c.pollWakes.Add(1)
			c.mu.Lock()
			if c.dirty {
				parents = c.regroup(byDir, parents[:0])
				c.dirty = false
			}
			events = c.pollThrottle(parents, events[:0], buf)
			hot := hotCount(parents)
			c.mu.Unlock()
			for i := range events {
				sink.CPU(&events[i])
			}
			if len(events) > 0 {
				sink.Flush()
			}
			armPoll(hot)
			continue
		case <-t.C:
		}
		now := time.Now()
		c.lastTick.Store(now.UnixNano())
		t.Reset(wallclock.Until(now, period))
		refresh()
		hot := 0
		for _, pg := range parents {
			pg.quiet = !c.NoParentShortcut && pg.idle(buf)
			if pg.quiet {
				for _, s := range pg.members {
					s.seq++ // an idle period: a gap, as on the kernel backend
					s.at = now
					s.hot = false
				}
				continue
			}
			for i, s := range pg.members {
				if c.sample(s, &st, buf, period, now) {
					sink.CPU(&st)
				}
				if s.hot {
					hot++
				}
				if i%yieldEvery == yieldEvery-1 {
					runtime.Gosched()
				}
			}
		}
		sink.Flush()
		if len(parents) == 0 {
			if pt != nil {
				pt.Stop()
			}
			poll = nil
		} else {
			armPoll(hot)
		}
	}
}

// yieldEvery is how many groups a period's pass reads (about 5 µs each)
// before it lets other goroutines run: escrad runs on one P by default
// (--procs), and an OOM event or a SetLimits arriving during a pass over
// thousands of groups must not wait for the whole pass.
const yieldEvery = 16

// pollUsage is a group's cumulative CPU time in ns: v2 from the cpu.stat
// just read, v1 from cpuacct.usage (one more pread).
func (c *Source) pollUsage(s *sampled, stat, buf []byte) (uint64, bool) {
	if s.g.Paths.Version == cgroups.V2 {
		us, ok := cgroups.KeyedValue(stat, "usage_usec")
		return us * 1000, ok
	}
	if c.ThrottleNear <= 0 {
		return 0, false
	}
	v, err := s.g.ReadInt(cgroups.CPUAcctUsage)
	if err != nil || v < 0 {
		return 0, false
	}
	return uint64(v), true
}

// sample fills st for one period; false when there is nothing to report
// (first sample, or the group vanished).
func (c *Source) sample(s *sampled, st *pb.CpuStat, buf []byte, period time.Duration, now time.Time) bool {
	if s.primed && now.Sub(s.at) < period/2 {
		// The previous tick fired late and this one, aligned to the
		// period, comes soon after: a window this short would show a
		// throttled group as idle. Fold it into the next record.
		return false
	}
	var usageNs uint64
	var cs cgroups.CPUStat
	v2 := s.g.Paths.Version == cgroups.V2
	readStats := true
	if v2 {
		b, err := s.g.Read(cgroups.CPUStatFile, buf)
		if err != nil || cgroups.ParseCPUStat(b, &cs) != nil {
			return false
		}
		usageNs = cs.UsageUs * 1000
	} else {
		b, err := s.g.Read(cgroups.CPUAcctUsage, buf)
		if err != nil {
			return false
		}
		u, err := cgroups.ParseUint(b)
		if err != nil {
			return false
		}
		usageNs = u
		// cpu.stat (throttle counters) is read when the group could have
		// been throttled: it used at least a quarter of its quota this
		// period or was throttled last period; otherwise its cumulative
		// counters are refreshed once a second. Idle groups — most groups
		// most of the time — thus cost one read per period.
		du := uint64(0)
		if usageNs > s.usageNs {
			du = (usageNs - s.usageNs) / 1000
		}
		quota := int64(-1)
		if c.Limits != nil {
			quota, _ = c.Limits(s.h)
		}
		busy := quota > 0 && du*4 >= uint64(quota)
		readStats = !s.primed || busy || s.wasThrot || s.skipStats >= 10
		if readStats {
			b, err := s.g.Read(cgroups.CPUStatFile, buf)
			if err != nil || cgroups.ParseCPUStat(b, &cs) != nil {
				return false
			}
			s.skipStats = 0
		} else {
			cs.NrThrottled, cs.ThrottledUs = s.nrThrot, s.throtUs
			s.skipStats++
		}
	}
	if !s.primed {
		s.primed = true
		s.usageNs, s.nrThrot, s.throtUs, s.at = usageNs, cs.NrThrottled, cs.ThrottledUs, now
		return false
	}
	win := now.Sub(s.at)
	s.at = now
	var du uint64
	if usageNs > s.usageNs {
		du = (usageNs - s.usageNs) / 1000
	}
	var dt uint64
	if cs.ThrottledUs > s.throtUs {
		dt = cs.ThrottledUs - s.throtUs
	}
	throttled := cs.NrThrottled > s.nrThrot
	s.usageNs, s.nrThrot, s.throtUs, s.wasThrot = usageNs, cs.NrThrottled, cs.ThrottledUs, throttled
	if du == 0 && !throttled {
		// A fully idle period is not sent: the gap in period_seq means
		// "unused", as for the kernel backend's stopped period timer.
		s.seq++
		s.hot = false
		return false
	}

	quota, cfsPeriod := int64(-1), uint32(0)
	if c.Limits != nil {
		quota, cfsPeriod = c.Limits(s.h)
	}
	if win > period*5/4 || win < period*3/4 {
		// A late (busy host, TCG) or early timer: the usage covers more or
		// less than one period; the record says per period.
		du = du * uint64(period) / uint64(win)
	}
	var unused int64
	q := quota
	if quota > 0 {
		// Quota per sampling period (they differ when the CFS period is
		// not the daemon's period).
		if cfsPeriod != 0 && time.Duration(cfsPeriod)*time.Microsecond != period {
			q = quota * int64(period/time.Microsecond) / int64(cfsPeriod)
		}
		unused = max(q-int64(du), 0)
	}
	c.markHot(s, throttled, du, q)
	*st = pb.CpuStat{
		Handle: s.h, PeriodSeq: s.seq, QuotaUs: quota, UnusedUs: unused,
		Throttled: throttled, NrThrottled: cs.NrThrottled, ThrottledUs: dt, UsageUs: du,
	}
	if cfsPeriod != 0 && time.Duration(cfsPeriod)*time.Microsecond != period {
		st.PeriodUs = cfsPeriod
	}
	s.seq++
	return true
}
