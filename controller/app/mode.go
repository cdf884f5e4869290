package app

import (
	"errors"
	"math"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
)

// Recommend mode (docs/spec.md, mode: recommend): the app decides every
// period as it would when enforcing, on the same books, and shows the
// results; nothing reaches the daemons, so no cgroup of its containers
// changes. The books read the daemons' statistics against the
// recommendations (allocator/recommend.go), reclaim runs on the books
// alone, leases are not lent, and OOM requests are denied: the kernel acts
// at the container's own limit, as it would without Escra.

// ErrRecommend is what a decision's callback gets in recommend mode.
var ErrRecommend = errors.New("app: recommend mode: limits are shown, not applied")

// Caps are a member's max_cpu and max_memory (0: none).
type Caps struct {
	CPUCores    float64
	MemoryBytes int64
}

// Configure sets the app's mode and its members' caps, found by member
// name. Members that joined already get their caps at once; the switch to
// enforce sends each member the recommendation that differs from what its
// cgroup holds (the next period goes on from there); the switch to
// recommend leaves the cgroups with the limits last applied.
func (s *App) Configure(recommend bool, caps func(name string) Caps) {
	s.call(func() {
		var ds []allocator.Decision
		switch {
		case recommend && !s.recommend:
			s.a.Recommend()
			s.recommend = true
			if s.a.LeasedUs() > 0 {
				s.sendLeases(s.a.RebalanceLeases(0)) // lent runtime comes back
			}
			s.log.Info("recommend mode: decisions are computed and shown, not applied")
		case !recommend && s.recommend:
			s.recommend = false
			ds = s.a.Enforce()
			s.log.Info("enforce mode: the recommendations are applied", "containers", len(ds))
		}
		s.caps = caps
		for _, m := range s.a.Members() {
			if mi := s.members[m.Key]; mi != nil {
				if q, mem := s.capsOf(mi.Name); q != m.MaxQuotaUs || mem != m.MaxMem {
					ds = append(ds, s.a.SetMax(m.Key, q, mem)...)
				}
			}
		}
		s.applyAll(ds)
	})
}

// Recommending reports whether the app is in recommend mode.
func (s *App) Recommending() bool {
	var r bool
	s.call(func() { r = s.recommend })
	return r
}

// capsOf is a member's caps in the allocator's units.
func (s *App) capsOf(name string) (quotaUs, mem int64) {
	if s.caps == nil {
		return 0, 0
	}
	c := s.caps(name)
	if c.CPUCores > 0 {
		quotaUs = max(1, int64(math.Round(c.CPUCores*float64(s.a.P.PeriodUs()))))
	}
	return quotaUs, max(c.MemoryBytes, 0)
}

// recommended shows decision d of member m instead of sending it.
func (s *App) recommended(m *member, d allocator.Decision) {
	if s.hub.Active() {
		s.hub.Publish(events.Event{Time: time.Now(), App: s.Name, Host: m.HostID, ContainerID: m.ContainerID,
			Handle: m.Handle, Kind: "recommendation", Generation: d.Gen, CPUQuotaUs: d.QuotaUs, MemoryBytes: d.MemLimit,
			Reason: string(d.Reason)})
	}
}

// recommendOOM answers an OOM request in recommend mode: denied, so the
// kernel acts at the container's own limit; the recommendation takes in
// the usage the request reports.
func (s *App) recommendOOM(m *member, r oomReq) {
	if d, ok := s.a.ShadowUsage(r.key, int64(min(r.req.GetUsageBytes(), 1<<50))); ok {
		s.send(d, 0, nil, true)
	}
	var limit int64
	if bm := s.a.Member(r.key); bm != nil {
		bm.OOMRequests++
		bm.OOMDenies++
		_, limit = bm.Applied()
	}
	s.verdict(m, r, false, limit, "recommend mode: Escra raises no limit; the kernel acts at the container's own")
}
