package app

import (
	"errors"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

type oomReq struct {
	key      allocator.Key
	id       uint64
	req      *pb.OomRequest
	received time.Time
}

// OOM handles a blocking OOM request (§IV-D-2). A grant's SetLimits and
// its verdict leave together, the limit first. The request is decided from
// the books on the caller's goroutine (the session's reader) under the
// app's lock, as telemetry is: it waits for one decision at most, not
// for the app's queue, and the raised limit leaves with one write from
// here. Only when closures queued before it have not run yet does it
// take its turn behind them.
func (s *App) OOM(k allocator.Key, requestID uint64, req *pb.OomRequest, received time.Time) {
	r := oomReq{k, requestID, req, received}
	if !s.lockInline() {
		s.do(func() { s.oom(r, true) })
		return
	}
	s.oom(r, true)
	s.unlockInline()
}

func (s *App) oom(r oomReq, mayReclaim bool) {
	m := s.members[r.key]
	if m == nil {
		return
	}
	if s.recommend {
		s.recommendOOM(m, r)
		return
	}
	o := s.a.OOM(r.key, oomUsage(r.req), int64(min(r.req.GetLimitBytes(), 1<<50)), oomWant(r.req),
		mayReclaim && s.reclaiming == 0)
	if s.lendsMemory() {
		s.sendMemCredits(nil) // credit revoked for the pool (allocator/memcredit.go)
	}
	// A reclaim in flight is waited for until its stragglers are late
	// (reclaimGrace after the first answer): a dead host must not hold
	// healthy hosts' verdicts until its RPC times out.
	if o.Action == allocator.OOMReclaim || (mayReclaim && s.reclaiming > 0 && !s.late && o.Action == allocator.OOMDeny) {
		// Wait for the reclaim (ours or one in flight), then decide again.
		s.oomQueue = append(s.oomQueue, r)
		if s.reclaiming == 0 {
			s.startReclaim(o.Reclaim)
		}
		return
	}
	if o.Action != allocator.OOMGrant {
		s.verdict(m, r, false, m0(s.a.Member(r.key)), o.Reason)
		return
	}
	// The raise and the verdict leave in this order on the host's one
	// stream, and the daemon applies a SetLimits before it reads what
	// follows: the limit is in force when the verdict arrives, so the
	// verdict does not wait for the acknowledgement (one round trip, as
	// in Escra §IV-D-2, not two).
	d := o.Decision
	s.apply(d, 0, func(err error) {
		if err == nil || errors.Is(err, session.ErrClosed) || errors.Is(err, session.ErrTimeout) ||
			errors.Is(err, session.ErrNotAcked) {
			return
		}
		// Refused: the daemon may still raise the limit from the
		// verdict's new_limit_bytes, so the grant stays counted (the
		// larger limit, as for any unanswered raise) until the member's
		// next decision is acknowledged.
		s.log.Warn("OOM grant's limit refused by the daemon; kept counted", "handle", m.Handle, "err", err)
	})
	s.verdict(m, r, true, d.MemLimit, o.Reason)
	if len(o.Reclaim) > 0 && s.reclaiming == 0 {
		s.startReclaim(o.Reclaim) // refills the pool; nothing waits for it
	}
}

// oomUsage and oomWant are an OOM request's usage and the bytes its
// allocation wants, bounded as the allocator takes them.
func oomUsage(req *pb.OomRequest) int64 { return int64(min(req.GetUsageBytes(), 1<<50)) }

func oomWant(req *pb.OomRequest) int64 { return int64(min(req.GetPagesWanted(), 1<<28)) * 4096 }

func m0(m *allocator.Member) int64 {
	if m == nil {
		return 0
	}
	return m.MemLimit
}

func (s *App) verdict(m *member, r oomReq, granted bool, limit int64, reason string) {
	m.Host.Verdict(r.id, &pb.OomVerdict{Handle: m.Handle, Granted: granted, NewLimitBytes: limit, Reason: reason}, r.received)
	if s.deferWake {
		s.noteWake(m.Host)
	}
	kind := "oom-denied"
	if granted {
		kind = "oom-granted"
	}
	s.cnt.Decision(kind)
	if granted {
		g := grantLog{name: m.Name, host: m.HostID, container: shortID(m.ContainerID),
			granted: limit - int64(min(r.req.GetLimitBytes(), 1<<50)), limit: limit, took: time.Since(r.received)}
		if s.deferWake {
			s.grantLogs = append(s.grantLogs, g) // written once the verdict left (unlockInline)
		} else {
			s.logGrant(g)
		}
	}
	if s.hub.Active() {
		g := granted
		s.hub.Publish(events.Event{Time: time.Now(), App: s.Name, Host: m.HostID, ContainerID: m.ContainerID,
			Handle: m.Handle, Kind: "oom-verdict", MemoryBytes: limit, Granted: &g, Reason: reason})
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// grantLog is one "OOM granted" line.
type grantLog struct {
	name, host, container string
	granted, limit        int64
	took                  time.Duration
}

// logGrant writes the system's signature event (Escra §IV-B) at info;
// the app is in s.log's attributes.
func (s *App) logGrant(g grantLog) {
	s.log.Info("OOM granted", "name", g.name, "host", g.host, "container", g.container,
		"granted_bytes", g.granted, "new_limit_bytes", g.limit, "time_to_grant", g.took)
}
