package telemetry

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/oom"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Cgroupfs is the stock-kernel Source: it samples cpuacct.usage and cpu.stat
// (v2: cpu.stat) once per period on a timer aligned to the period, and
// traps OOMs with package oom. The kernel's per-period unused runtime is not
// visible from user space (seed 000 §IV-B footnote 3), so unused is derived
// as quota − usage over the sampling period.
type Cgroupfs struct {
	Period time.Duration
	// Limits returns the CPU quota/period the daemon last wrote for h, so
	// the sampler need not read them back every period.
	Limits func(h uint32) (quotaUs int64, periodUs uint32)
	Log    *slog.Logger

	OOM *oom.Watcher

	// NoParentShortcut disables the idle-parent check (see parentGroup);
	// for measuring what it saves.
	NoParentShortcut bool

	// ThrottlePoll is how often, between period samples, nr_throttled of
	// every group with a quota is read for throttle events (0: never). A
	// rise is sent at once as a CpuStat with MidPeriod set, so the
	// controller can raise the quota before the period's record. On a
	// stock kernel nr_throttled (like throttled_time) moves when the CFS
	// period timer ends a throttled CFS period and refills the runtime,
	// not at the moment of the throttle: the event says "throttled in the
	// CFS period that just ended" and a raise takes effect for the CFS
	// period that just began (and unthrottles the group if it has already
	// run out again).
	ThrottlePoll time.Duration
	// ThrottleNear: the watcher also sends an event when a group has used
	// this fraction of its quota within the CFS period in progress (0:
	// only nr_throttled rises). That is the only sign of a throttle a
	// stock kernel shows while it happens: the group is about to run out,
	// and a raise written now refills its runtime before (or right after)
	// it does. The CFS period's start is estimated from nr_periods, which
	// moves when the period timer fires, and advanced on its grid while
	// the group is idle (the timer keeps its phase when it restarts).
	ThrottleNear float64

	mu     sync.Mutex
	groups map[uint32]*sampled
	dirty  bool // groups changed: regroup by parent

	lastTick atomic.Int64 // unix ns of the last period sample (escrad's watchdog)
}

// LastTick is when the sample loop last ran a period (zero before the
// first): escrad's systemd watchdog stops petting when it falls behind.
func (c *Cgroupfs) LastTick() time.Time {
	if ns := c.lastTick.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

type sampled struct {
	h         uint32
	g         *cgroups.Group
	seq       uint64
	primed    bool
	usageNs   uint64 // cumulative, v1 cpuacct.usage (ns) or v2 usage_usec*1000
	nrThrot   uint64
	throtUs   uint64
	wasThrot  bool
	skipStats int       // periods since cpu.stat was last read
	at        time.Time // when the baseline was taken

	// The throttle watcher's own baseline: the period record's nrThrot is
	// not touched between periods (and on v1 is not read every period).
	evNr     uint64
	evPrimed bool
	// Near-throttle detection: usage within the CFS period in progress.
	evPeriods uint64    // nr_periods at the last poll
	cfsStart  time.Time // estimated start of the CFS period in progress
	cfsUse0   uint64    // usage (ns) when it started
	pollUse   uint64    // usage at the last poll
	cfsQuota  int64     // quota at the last poll (a write refills the runtime)
	nearSent  bool      // an event went out for this CFS period
}

// DefaultThrottlePoll is the throttle watcher's default poll interval. At
// 2 ms (what docs/benchmarks.md's runs used) three escrads on a 2-core host
// with two busy loops starved their own period telemetry
// (TestE2EDeployAcrossThreeHosts: a third of the records, an OOM rescue
// too slow); at 10 ms the same test passes and an event is at most 10 ms
// late, a tenth of a period.
const DefaultThrottlePoll = 10 * time.Millisecond

// DefaultThrottleNear: an event when 95 % of the quota is used within a
// CFS period. Above the escra policy's 10 % headroom over the recent peak
// (a steady peak uses 91 % of the quota), so steady load sends none.
const DefaultThrottleNear = 0.95

// NewCgroupfs returns a source sampling every period.
func NewCgroupfs(period time.Duration, log *slog.Logger) (*Cgroupfs, error) {
	w, err := oom.NewWatcher()
	if err != nil {
		return nil, err
	}
	return &Cgroupfs{Period: period, Log: log, OOM: w, groups: map[uint32]*sampled{},
		ThrottlePoll: DefaultThrottlePoll, ThrottleNear: DefaultThrottleNear}, nil
}

// Backend implements Source.
func (c *Cgroupfs) Backend() pb.Backend { return pb.Backend_BACKEND_CGROUPFS }

// Watch implements Source. A group whose OOM trap cannot be set up is still
// sampled (and the error returned for the log).
func (c *Cgroupfs) Watch(h uint32, g *cgroups.Group) error {
	c.mu.Lock()
	c.groups[h] = &sampled{h: h, g: g}
	c.dirty = true
	c.mu.Unlock()
	return c.OOM.Add(h, g)
}

// Unwatch implements Source.
func (c *Cgroupfs) Unwatch(h uint32) {
	c.OOM.Remove(h)
	c.mu.Lock()
	delete(c.groups, h)
	c.dirty = true
	c.mu.Unlock()
}

// Resolve implements Source.
func (c *Cgroupfs) Resolve(ev oom.Event, granted bool, newLimit int64) error {
	if granted {
		return c.OOM.Granted(ev.Handle, newLimit)
	}
	return c.OOM.Release(ev.Handle)
}

// MemoryLimitChanged implements LimitFollower: the v2 brake follows.
func (c *Cgroupfs) MemoryLimitChanged(h uint32, limit int64) {
	if err := c.OOM.Follow(h, limit); err != nil && c.Log != nil {
		c.Log.Warn("memory.high not moved with memory.max", "handle", h, "err", err)
	}
}

// Maintain implements LimitFollower.
func (c *Cgroupfs) Maintain(h uint32) { c.OOM.Maintain(h) }

// Run implements Source.
func (c *Cgroupfs) Run(ctx context.Context, sink Sink) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.OOM.Run(sink.OOM); err != nil {
			c.Log.Error("oom watcher stopped", "err", err)
		}
	}()
	defer func() {
		c.OOM.RestoreAll()
		c.OOM.Close()
		<-done
	}()
	return c.sampleLoop(ctx, sink)
}

// sampleLoop samples every period and, between periods, watches for
// throttle events, until ctx ends.
func (c *Cgroupfs) sampleLoop(ctx context.Context, sink Sink) error {
	period := c.Period
	if period <= 0 {
		period = 100 * time.Millisecond
	}
	t := time.NewTimer(untilNext(time.Now(), period))
	defer t.Stop()
	// The throttle watcher runs on this goroutine, between period samples:
	// it reads the period state (seq) without a lock and the sink, which is
	// not safe for concurrent use, stays single-threaded.
	// The poll timer runs only while some group is watched: an idle
	// escrad should not wake 500 times a second (under QEMU's emulation
	// that alone took a quarter of a guest CPU).
	var poll <-chan time.Time
	var pt *time.Timer
	polling := c.ThrottlePoll > 0 && c.ThrottlePoll < period
	armPoll := func(groups int) {
		switch {
		case !polling || groups == 0:
			poll = nil
		case pt == nil:
			pt = time.NewTimer(c.ThrottlePoll)
			poll = pt.C
		default:
			pt.Reset(c.ThrottlePoll)
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
	var parents []*parentGroup
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
			c.mu.Lock()
			if c.dirty {
				parents = c.regroup(byDir, parents[:0])
				c.dirty = false
			}
			events = c.pollThrottle(parents, events[:0], buf)
			groups := len(parents)
			c.mu.Unlock()
			for i := range events {
				sink.CPU(&events[i])
			}
			if len(events) > 0 {
				sink.Flush()
			}
			armPoll(groups)
			continue
		case <-t.C:
		}
		now := time.Now()
		c.lastTick.Store(now.UnixNano())
		t.Reset(untilNext(now, period))
		refresh()
		if poll == nil {
			armPoll(len(parents))
		}
		for _, pg := range parents {
			if !c.NoParentShortcut && pg.idle(buf) {
				for _, s := range pg.members {
					s.seq++ // an idle period: a gap, as on the kernel backend
					s.at = now
				}
				continue
			}
			for _, s := range pg.members {
				if c.sample(s, &st, buf, period, now) {
					sink.CPU(&st)
				}
			}
		}
		sink.Flush()
	}
}

// pollThrottle reads cpu.stat (and usage) of every watched group with a
// quota and appends a throttle event for each that is about to run out of
// quota in the CFS period in progress (ThrottleNear) or whose nr_throttled
// rose since the last poll without such an event for that CFS period; the
// caller sends them and flushes, so they leave at once. Groups without a
// quota cannot be throttled; a parent whose usage did not move since the
// last poll had no member run, so none was newly throttled.
func (c *Cgroupfs) pollThrottle(parents []*parentGroup, out []pb.CpuStat, buf []byte) []pb.CpuStat {
	now := time.Now()
	for _, pg := range parents {
		if !c.NoParentShortcut && !pg.movedSincePoll(buf) {
			continue
		}
		for _, s := range pg.members {
			quota, periodUs := int64(-1), uint32(0)
			if c.Limits != nil {
				quota, periodUs = c.Limits(s.h)
			}
			if quota <= 0 {
				s.evPrimed = false
				continue
			}
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

// pollUsage is a group's cumulative CPU time in ns: v2 from the cpu.stat
// just read, v1 from cpuacct.usage (one more pread).
func (c *Cgroupfs) pollUsage(s *sampled, stat, buf []byte) (uint64, bool) {
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

// parentGroup is the common parent directory of some watched groups (on a
// Docker host: /docker or the engine's --cgroup-parent). Its cumulative
// usage covers all its descendants, so when it did not move during a
// period, no member ran: one read replaces one per member. That is the
// common case for a host of mostly idle containers; when siblings are
// busy the members are read one by one as usual.
type parentGroup struct {
	dir     string
	fd      int // cpuacct.usage (v1) or cpu.stat (v2) of dir; -1: none
	v2      bool
	last    uint64
	primed  bool
	members []*sampled
	// The throttle watcher's baseline, apart from the period's (last).
	pollLast   uint64
	pollPrimed bool
}

func (c *Cgroupfs) regroup(byDir map[string]*parentGroup, out []*parentGroup) []*parentGroup {
	for _, pg := range byDir {
		pg.members = pg.members[:0]
	}
	for _, s := range c.groups {
		dir := filepath.Dir(s.g.Paths.CPUAcct)
		v2 := s.g.Paths.Version == cgroups.V2
		if v2 {
			dir = filepath.Dir(s.g.Paths.Unified)
		}
		pg := byDir[dir]
		if pg == nil {
			pg = &parentGroup{dir: dir, fd: -1, v2: v2}
			name := "cpuacct.usage"
			if v2 {
				name = "cpu.stat"
			}
			if fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				pg.fd = fd
			}
			byDir[dir] = pg
		}
		pg.members = append(pg.members, s)
	}
	for dir, pg := range byDir {
		if len(pg.members) == 0 {
			pg.close()
			delete(byDir, dir)
			continue
		}
		out = append(out, pg)
	}
	return out
}

func (pg *parentGroup) close() {
	if pg.fd >= 0 {
		unix.Close(pg.fd)
		pg.fd = -1
	}
}

// idle reports whether no member can have run or been throttled since the
// last period: the parent's usage did not move, every member has a
// baseline and none was throttled last period (a throttled group with
// runnable tasks runs again when its quota refills each period, so its
// usage moves).
func (pg *parentGroup) idle(buf []byte) bool {
	u, ok := pg.usage(buf)
	if !ok {
		return false
	}
	same := pg.primed && u == pg.last
	pg.last, pg.primed = u, true
	if !same {
		return false
	}
	for _, s := range pg.members {
		if !s.primed || s.wasThrot {
			return false
		}
	}
	return true
}

// usage reads the parent's cumulative usage; false when it cannot.
func (pg *parentGroup) usage(buf []byte) (uint64, bool) {
	if pg.fd < 0 {
		return 0, false
	}
	n, err := unix.Pread(pg.fd, buf, 0)
	if err != nil {
		return 0, false
	}
	if pg.v2 {
		var cs cgroups.CPUStat
		if cgroups.ParseCPUStat(buf[:n], &cs) != nil || !cs.HasUsage {
			return 0, false
		}
		return cs.UsageUs, true
	}
	u, err := cgroups.ParseUint(buf[:n])
	return u, err == nil
}

// movedSincePoll reports whether the parent's usage moved since the
// throttle watcher's last look (true when unknown or on the first look).
func (pg *parentGroup) movedSincePoll(buf []byte) bool {
	u, ok := pg.usage(buf)
	if !ok {
		return true
	}
	moved := !pg.pollPrimed || u != pg.pollLast
	pg.pollLast, pg.pollPrimed = u, true
	return moved
}

// untilNext is the time to the next multiple of period (wall clock), so all
// containers are sampled at the same phase every period.
func untilNext(now time.Time, period time.Duration) time.Duration {
	d := period - time.Duration(now.UnixNano()%int64(period))
	if d < period/20 {
		d += period
	}
	return d
}

// sample fills st for one period; false when there is nothing to report
// (first sample, or the group vanished).
func (c *Cgroupfs) sample(s *sampled, st *pb.CpuStat, buf []byte, period time.Duration, now time.Time) bool {
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
	if quota > 0 {
		// Quota per sampling period (they differ when the CFS period is
		// not the daemon's period).
		q := quota
		if cfsPeriod != 0 && time.Duration(cfsPeriod)*time.Microsecond != period {
			q = quota * int64(period/time.Microsecond) / int64(cfsPeriod)
		}
		unused = max(q-int64(du), 0)
	}
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
