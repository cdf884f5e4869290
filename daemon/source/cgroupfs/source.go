package cgroupfs

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Source is the stock-kernel Source: it samples cpuacct.usage and cpu.stat
// (v2: cpu.stat) once per period on a timer aligned to the period, and
// traps OOMs with the Watcher. The kernel's per-period unused runtime is not
// visible from user space (Escra §IV-B footnote 3), so unused is derived
// as quota − usage over the sampling period.
type Source struct {
	Period time.Duration
	// Limits returns the CPU quota/period the daemon last wrote for h, so
	// the sampler need not read them back every period.
	Limits func(h uint32) (quotaUs int64, periodUs uint32)
	Log    *slog.Logger

	OOM *Watcher

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
	// ThrottleHot: only groups whose last period record used at least
	// this fraction of their quota, or were throttled, are polled (0:
	// every group with a quota). A group far below its quota cannot run
	// out within the period unless its load jumps, and then its next
	// period record (throttled, or near its quota) makes it polled: an
	// idle host polls nothing and its poll timer stays off.
	ThrottleHot float64
	// ThrottleWarm: while no group is hot the poll still runs this often
	// (0: not at all) and checks each parent's usage, so that a group
	// jumping from idle into its quota turns hot within ThrottleWarm
	// rather than at its next period record (see warmUp).
	ThrottleWarm time.Duration

	mu     sync.Mutex
	groups map[uint32]*sampled
	dirty  bool // groups changed: regroup by parent

	lastTick  atomic.Int64 // unix ns of the last period sample (escrad's watchdog)
	pollWakes atomic.Int64 // throttle polls run (tests, the idle-cost claim)
}

// LastTick is when the sample loop last ran a period (zero before the
// first): escrad's systemd watchdog stops petting when it falls behind.
func (c *Source) LastTick() time.Time {
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
	// hot: the last period record was throttled or near the quota (see
	// ThrottleHot); only hot groups are polled.
	hot       bool
	pollReads int // cpu.stat reads by the watcher (tests)
	warmReads int // usage reads by warmUp (tests)
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

// DefaultThrottleHot: a group is polled between period samples while its
// last period used 80 % of its quota or was throttled. Below the policy's
// steady 91 % (10 % headroom over the peak), so a group running at its
// peak is watched, and far above an idle group's 0 %.
const DefaultThrottleHot = 0.8

// DefaultThrottleWarm: an idle host checks its parents' usage every 20 ms
// (one read per parent), so a burst from idle is watched within 20 ms.
const DefaultThrottleWarm = 20 * time.Millisecond

// NewSource returns a source sampling every period.
func NewSource(period time.Duration, log *slog.Logger) (*Source, error) {
	w, err := NewWatcher()
	if err != nil {
		return nil, err
	}
	return &Source{Period: period, Log: log, OOM: w, groups: map[uint32]*sampled{},
		ThrottlePoll: DefaultThrottlePoll, ThrottleNear: DefaultThrottleNear, ThrottleHot: DefaultThrottleHot, ThrottleWarm: DefaultThrottleWarm}, nil
}

// Backend implements Source.
func (c *Source) Backend() pb.Backend { return pb.Backend_BACKEND_CGROUPFS }

// Watch implements Source. A group whose OOM trap cannot be set up is still
// sampled (and the error returned for the log).
func (c *Source) Watch(h uint32, g *cgroups.Group) error {
	c.mu.Lock()
	c.groups[h] = &sampled{h: h, g: g}
	c.dirty = true
	c.mu.Unlock()
	return c.OOM.Add(h, g)
}

// Unwatch implements Source.
func (c *Source) Unwatch(h uint32) {
	c.OOM.Remove(h)
	c.mu.Lock()
	delete(c.groups, h)
	c.dirty = true
	c.mu.Unlock()
}

// Resolve implements Source.
func (c *Source) Resolve(ev rescue.Event, granted bool, newLimit int64) error {
	if granted {
		return c.OOM.Granted(ev.Handle, newLimit)
	}
	return c.OOM.Release(ev.Handle)
}

// MemoryLimitChanged implements LimitFollower: the v2 brake or the v1
// usage threshold follows.
func (c *Source) MemoryLimitChanged(h uint32, limit int64) {
	if err := c.OOM.Follow(h, limit); err != nil && c.Log != nil {
		c.Log.Warn("memory.high not moved with memory.max", "handle", h, "err", err)
	}
}

// Maintain implements LimitFollower.
func (c *Source) Maintain(h uint32) { c.OOM.Maintain(h) }

// Run implements Source.
func (c *Source) Run(ctx context.Context, sink source.Sink) error {
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
