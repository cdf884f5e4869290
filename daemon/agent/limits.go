package agent

import (
	"errors"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/daemon/source"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

func (a *Agent) cpuLimits(h uint32) (int64, uint32) {
	e := a.app.Get(h)
	if e == nil {
		return -1, 0
	}
	c, _ := e.Current()
	return c.CPUQuotaUs, c.CPUPeriodUs
}

// SetLimits implements link.Handler: the fast path.
func (a *Agent) SetLimits(recv time.Time, s *pb.SetLimits) *pb.SetLimitsAck {
	ack := &pb.SetLimitsAck{Applied: make([]*pb.SetLimitsAck_Applied, len(s.Updates))}
	for i, u := range s.Updates {
		var err error
		if u.Limits.GetCpuQuotaUs() != 0 && a.cpu.manages(u.Handle) {
			err = a.applyPlaced(u)
		} else {
			err = a.app.Apply(u.Handle, u.Generation, u.Limits)
		}
		done := time.Now()
		lat := done.Sub(recv)
		ap := &pb.SetLimitsAck_Applied{Handle: u.Handle, Generation: u.Generation, AppliedUnixNs: done.UnixNano(), ApplyLatencyNs: uint64(lat)}
		if err != nil {
			ap.Error = err.Error()
			a.m.applyErrors.Inc()
			if !errors.Is(err, limits.ErrStale) && !errors.Is(err, limits.ErrUnknown) {
				a.log.Warn("applying limits failed", "handle", u.Handle, "err", err)
			}
		} else {
			a.m.applyLatency.Observe(lat.Seconds())
			if a.app.HoldAck(u.Handle, u.Generation) {
				ap.Deferred = true // Agent.settled sends the ack
				a.m.acksDeferred.Inc()
			}
			if q := u.Limits.GetCpuQuotaUs(); q != 0 {
				a.noteQuota(u.Handle, q, done)
			}
			if u.Limits.GetMemoryLimitBytes() != 0 {
				a.mu.Lock()
				m := a.byH[u.Handle]
				a.mu.Unlock()
				if m != nil {
					a.followLimit(m)
					a.rescue.LimitRaised(m.oom, u.Limits.GetMemoryLimitBytes())
				}
			}
		}
		ack.Applied[i] = ap
	}
	return ack
}

// settled sends the acknowledgements SetLimits deferred for h, up to
// generation gen, once Docker's view settled (limits.Reconciler.Settled).
func (a *Agent) settled(h uint32, gen uint64) {
	now := time.Now().UnixNano()
	_ = a.link.LateAck(&pb.SetLimitsAck{Applied: []*pb.SetLimitsAck_Applied{{Handle: h, Generation: gen, AppliedUnixNs: now}}})
}

// applyPlaced applies an update of a C1 (escra.cpu=wysiwyg) container
// through the CPU allocator, which moves its cpuset around the quota.
func (a *Agent) applyPlaced(u *pb.LimitUpdate) error {
	e := a.app.Get(u.Handle)
	if e == nil {
		return limits.ErrUnknown
	}
	cur, gen := e.Current()
	if u.Generation != 0 && u.Generation < gen {
		return limits.ErrStale
	}
	period := u.Limits.GetCpuPeriodUs()
	if period == 0 {
		period = cur.CPUPeriodUs
	}
	return a.cpu.setQuota(u, period, func(l *pb.Limits) error { return a.app.Apply(u.Handle, u.Generation, l) })
}

// followLimit tells the source that m's memory limit was written (cgroupfs
// moves its v2 memory.high brake or its v1 usage threshold with it; a
// limit lowered by reclaim must not leave either above the limit, where it
// never fires).
func (a *Agent) followLimit(m *managed) {
	if f, ok := a.src.(source.LimitFollower); ok {
		cur, _ := m.e.Current()
		f.MemoryLimitChanged(m.h, cur.MemoryBytes)
	}
}

// Reclaim implements link.Handler (Escra §IV-C).
func (a *Agent) Reclaim(r *pb.ReclaimRequest) *pb.ReclaimResult {
	res := &pb.ReclaimResult{Reclaimed: a.app.Reclaim(r.SafeMarginBytes, r.Handles)}
	var sum uint64
	for _, x := range res.Reclaimed {
		sum += x.ReclaimedBytes
		a.mu.Lock()
		m := a.byH[x.Handle]
		a.mu.Unlock()
		if m != nil {
			a.followLimit(m)
		}
	}
	a.m.reclaimed.Add(float64(sum))
	return res
}

// MemoryUsage implements link.Handler.
func (a *Agent) MemoryUsage() *pb.MemoryUsage {
	ms := a.list()
	mu := &pb.MemoryUsage{TakenUnixNs: time.Now().UnixNano(), Samples: make([]*pb.MemoryUsage_Sample, 0, len(ms))}
	for _, m := range ms {
		u, err := m.g.ReadInt(cgroups.MemUsage)
		if err != nil {
			continue
		}
		cur, _ := m.e.Current()
		// CPU usage travels in the per-period telemetry; the snapshot
		// stays one read per container (it runs every heartbeat).
		mu.Samples = append(mu.Samples, &pb.MemoryUsage_Sample{Handle: m.h, UsageBytes: uint64(max(u, 0)), LimitBytes: cur.MemoryBytes})
	}
	return mu
}
