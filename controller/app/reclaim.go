package app

import (
	"errors"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// PeriodicReclaim runs the §IV-C loop once (the server calls it every
// ReclaimEvery). Skipped while a reclaim is in flight.
func (s *App) PeriodicReclaim() {
	s.do(func() {
		if s.recommend {
			// On the books only: the daemons' limits are not touched.
			s.a.ShadowReclaim()
			s.applyAll(s.a.FillPending())
			return
		}
		if s.reclaiming == 0 && len(s.members) > 0 {
			s.startReclaim(nil)
		}
	})
}

// startReclaim asks each host of keys (all members when keys is nil) to
// set limit → usage + δ where limit > usage + δ (§IV-C).
func (s *App) startReclaim(keys []allocator.Key) {
	byHost := map[Host][]uint32{}
	var hosts []Host
	if keys == nil { // periodic: every member with an assigned limit
		for _, m := range s.a.Members() {
			if m.MemLimit > 0 {
				keys = append(keys, m.Key)
			}
		}
	}
	for _, k := range keys {
		m := s.members[k]
		if m == nil {
			continue
		}
		if _, ok := byHost[m.Host]; !ok {
			hosts = append(hosts, m.Host)
		}
		byHost[m.Host] = append(byHost[m.Host], m.Handle)
	}
	if len(hosts) == 0 {
		s.afterReclaim()
		return
	}
	s.reclaiming, s.answered, s.late = len(hosts), false, false
	s.reclaimN++
	margin := uint64(s.a.P.SafeMarginBytes)
	for _, h := range hosts {
		h.Reclaim(byHost[h], margin, func(res *pb.ReclaimResult, err error) {
			// Answers come from the session's reader (or sweeper), never
			// with s.mu held, and are taken there, as acks are: the
			// OOM requests waiting for them are not queued behind the
			// app's closures. A request that could not be sent
			// (ErrClosed) is answered from here: that one is handed over.
			if errors.Is(err, session.ErrClosed) {
				go s.do(func() { s.reclaimDone(h, res, err) })
				return
			}
			s.mu.Lock()
			s.deferWake = true
			s.reclaimDone(h, res, err)
			s.unlockInline()
		})
		if s.deferWake {
			s.noteWake(h) // the request leaves with the caller's write
		}
	}
}

func (s *App) reclaimDone(h Host, res *pb.ReclaimResult, err error) {
	if err != nil {
		s.log.Warn("reclaim failed", "err", err)
	}
	for _, r := range res.GetReclaimed() {
		for _, m := range s.members { // handles are per host; few members per host per app
			if m.Host == h && m.Handle == r.GetHandle() {
				nl, u := r.GetNewLimitBytes(), int64(min(r.GetUsageBytes(), 1<<50))
				if s.a.Reclaimed(m.Key, nl, u) {
					s.cnt.Decision("reclaim")
					if s.hub.Active() {
						s.hub.Publish(events.Event{Time: time.Now(), App: s.Name, Host: m.HostID, ContainerID: m.ContainerID,
							Handle: m.Handle, Kind: "reclaim", MemoryBytes: nl, Reason: "limit > usage + δ"})
					}
				} else if nl > 0 && nl < u {
					s.cnt.BadStat("reclaim_below_usage")
				}
				break
			}
		}
	}
	if s.reclaiming > 0 {
		s.reclaiming--
	}
	if s.reclaiming == 0 {
		s.afterReclaim()
		return
	}
	s.grantCovered()
	if err == nil && !s.answered {
		// Live hosts answer within a grace of each other; one that has
		// not by then (dead, partitioned) is not waited for.
		s.answered = true
		n := s.reclaimN
		time.AfterFunc(reclaimGrace, func() {
			s.do(func() {
				if s.reclaimN == n && s.reclaiming > 0 && !s.late {
					s.late = true
					s.afterReclaim()
				}
			})
		})
	}
}

// reclaimGrace is how long after a reclaim's first answer the others are
// waited for before queued OOM requests are decided with what came back
// (a reclaim answer takes well under 1 ms on a healthy host; escrad's OOM
// deadline is 200 ms).
const reclaimGrace = 50 * time.Millisecond

// grantCovered decides, in the order they came, the OOM requests waiting
// for a reclaim that what came back so far covers with their whole step
// (Books.OOMCovered), without waiting for the other hosts' answers: those
// can only add to the pool, so the verdict would be the same, later. It
// stops at the first request not covered yet, which waits for the rest
// (or for reclaimGrace) with the ones behind it.
func (s *App) grantCovered() {
	n := 0
	for _, r := range s.oomQueue {
		if s.members[r.key] != nil && !s.a.OOMCovered(r.key, oomUsage(r.req), oomWant(r.req)) {
			break
		}
		n++
		s.oom(r, false)
	}
	if n > 0 {
		s.oomQueue = append(s.oomQueue[:0], s.oomQueue[n:]...)
	}
}

func (s *App) afterReclaim() {
	q := s.oomQueue
	s.oomQueue = nil
	for _, r := range q {
		s.oom(r, false)
	}
	s.applyAll(s.a.FillPending())
}
