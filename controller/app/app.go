// Package app runs the Distributed Containers of seed 000 (§III, §IV-A,
// §IV-C): one goroutine per app owns its allocator state, so decisions
// for one app are serialized and a storm in one app never delays another.
// It carries the allocator's decisions out through the hosts' sessions;
// no lock is held across network I/O (sessions queue, their writers send).
package app

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Host is the daemon session a member lives on (*session.Session).
type Host interface {
	Push(u session.Update)
	// Queue adds an update without waking the writer; Wake sends what is queued.
	Queue(u session.Update)
	Wake()
	Reclaim(handles []uint32, marginBytes uint64, cb func(*pb.ReclaimResult, error))
	Verdict(requestID uint64, v *pb.OomVerdict, received time.Time)
	// Lease sends a CpuLease grant or revoke (issue 11, host-local leases).
	Lease(l *pb.CpuLease)
}

// MemberInfo identifies a member to the app.
type MemberInfo struct {
	Key         allocator.Key
	Host        Host
	HostID      string
	Handle      uint32
	ContainerID string
	Name        string
	HostMaxUs   int64
	MemUsage    int64
	// The limits its cgroup holds at registration (allocator.Join).
	CurQuotaUs, CurMem int64
	// Auto-created apps grow their budget by these when the member joins.
	ContribCores float64
	ContribMem   int64
}

type member struct {
	MemberInfo
}

type oomReq struct {
	key      allocator.Key
	id       uint64
	req      *pb.OomRequest
	received time.Time
}

// Counters an app reports to the server's metrics.
type Counters interface {
	Decision(kind string)
	BadStat(reason string)
	// ThrottleEvent counts a throttle event by result: raised, nochange
	// or stale.
	ThrottleEvent(result string)
	// Lease counts a lease event: grant, revoke, use, return.
	Lease(event string)
}

// App is one Distributed Container around its allocator.Books: its
// goroutine runs TCP-side events; telemetry is decided inline by the UDP
// reader under the same mutex, so all decisions for an app are serialized
// without a goroutine hand-off per datagram.
type App struct {
	Name string
	in   chan func()
	done chan struct{}
	mu   sync.Mutex // held while deciding; never across network I/O

	// owned by the app's goroutine
	a          *allocator.Books
	auto       bool
	retired    bool // an emptied auto app, about to be forgotten
	members    map[allocator.Key]*member
	oomQueue   []oomReq
	reclaiming int    // outstanding reclaim RPCs
	reclaimN   uint64 // reclaims started, to tell a stale grace timer
	answered   bool   // a host answered the reclaim in flight
	late       bool   // its stragglers are no longer waited for
	log        *slog.Logger
	hub        *events.Hub
	cnt        Counters
	periodUs   uint32
	// Sessions of the hosts that hold (or may be granted) a lease; kept
	// until the session ends, so a revoke reaches a host whose members left.
	hosts map[allocator.HostID]Host
	// Held shares of members whose host died (LeaveHeld): id -> the
	// hold's sequence number, so an old expiry cannot end a newer hold.
	holds   map[string]uint64
	holdSeq uint64

	hookMu sync.Mutex
	onStop []func()
}

// New starts an app's goroutine. auto marks an app created for a
// container whose app was never defined; its budget grows with members.
func New(name string, b allocator.Budget, p allocator.Params, pol allocator.Policy, auto bool,
	log *slog.Logger, hub *events.Hub, cnt Counters) (*App, error) {
	a, err := allocator.NewBooks(name, b, p, pol)
	if err != nil {
		return nil, err
	}
	// Freed runtime and memory are handed out only once the daemon
	// acknowledged the cut (issue 12; allocator/applied.go).
	a.AckGated = true
	s := &App{Name: name, in: make(chan func(), 256),
		done: make(chan struct{}), a: a, auto: auto, members: map[allocator.Key]*member{},
		log: log.With("app", name), hub: hub, cnt: cnt, periodUs: uint32(p.PeriodUs()),
		hosts: map[allocator.HostID]Host{}, holds: map[string]uint64{}}
	go s.run()
	return s, nil
}

func (s *App) run() {
	// Leases are rebalanced on a ticker at the allocator period rather
	// than on telemetry: an idle app (no datagrams) still lends its pool,
	// and a period's stats arrive spread over the period from many hosts,
	// so "the first stat of a period" is no cleaner a moment.
	var tick <-chan time.Time
	if s.a.LeaseFraction() > 0 {
		t := time.NewTicker(s.a.P.Period)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.done:
			return
		case f := <-s.in:
			s.mu.Lock()
			f()
			s.mu.Unlock()
		case <-tick:
			s.mu.Lock()
			if len(s.members) > 0 || s.a.LeasedUs() > 0 {
				s.sendLeases(s.a.RebalanceLeases(s.a.LeaseFraction()))
			}
			s.mu.Unlock()
		}
	}
}

// sendLeases sends lease commands to their hosts, with the revocations
// joins, leaves and budget changes queued.
func (s *App) sendLeases(cmds []allocator.LeaseCmd) {
	cmds = append(cmds, s.a.TakeLeaseCmds()...)
	for _, c := range cmds {
		h := s.hosts[c.Host]
		if h == nil {
			continue // session gone: LeaseDrop forgets the lease
		}
		h.Lease(&pb.CpuLease{App: s.Name, LeaseId: c.ID, AddUs: c.AddUs, Revoke: c.Revoke})
		if c.Revoke {
			s.cnt.Lease("revoke")
		} else {
			s.cnt.Lease("grant")
		}
	}
}

// Stop ends the goroutine, then runs the OnStop hooks.
func (s *App) Stop() {
	close(s.done)
	s.hookMu.Lock()
	hooks := s.onStop
	s.onStop = nil
	s.hookMu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// OnStop runs f when the app stops (a policy's own loop, e.g. pema).
func (s *App) OnStop(f func()) {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	s.onStop = append(s.onStop, f)
}

// do runs f on the app's goroutine (blocking when the queue is full: TCP
// messages apply backpressure to their own session only).
func (s *App) do(f func()) {
	select {
	case s.in <- f:
	case <-s.done:
	}
}

// call runs f on the app's goroutine and waits.
func (s *App) call(f func()) {
	ch := make(chan struct{})
	s.do(func() { f(); close(ch) })
	select {
	case <-ch:
	case <-s.done:
	}
}

// CPUStat decides one period's statistic (§IV-D-1) on the caller's
// goroutine (the UDP reader). The update is queued on the member's host
// without waking its writer: the caller wakes it once per datagram, so
// all updates a datagram causes travel in one SetLimits envelope.
func (s *App) CPUStat(k allocator.Key, st ingest.Stat, recvNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.a.CPU(k, st.Stat)
	switch err {
	case nil:
	case allocator.ErrStale:
		s.cnt.BadStat("stale")
		return
	case allocator.ErrAbsurd:
		s.cnt.BadStat("absurd")
		return
	default:
		s.cnt.BadStat("unknown_container")
		return
	}
	if d.Gen != 0 {
		s.send(d, recvNs, nil, false)
	}
}

// Throttle event results (metric labels).
const (
	ThrottleRaised   = "raised"
	ThrottleNoChange = "nochange"
	ThrottleStale    = "stale"
	ThrottleTook     = "took"
)

// ThrottleEvent hands a throttle event (member k ran out of quota in the
// middle of period seq) to the policy on the caller's goroutine, like
// CPUStat: a raise is queued on the host exactly as a period decision,
// and the caller wakes the writer.
func (s *App) ThrottleEvent(k allocator.Key, seq uint64, recvNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds, err := s.a.Throttle(k, seq)
	switch err {
	case nil:
	case allocator.ErrStale:
		// The period's record came first (reordered datagrams): the
		// period decision has already seen the throttle.
		s.cnt.ThrottleEvent(ThrottleStale)
		return
	default:
		s.cnt.BadStat("unknown_container")
		return
	}
	raised := false
	for _, d := range ds {
		raised = raised || d.Key == k
		// The caller wakes the event's host; a sibling cut on another
		// host wakes that host's writer itself.
		other := d.Key != k && s.members[d.Key] != nil && s.members[k] != nil &&
			s.members[d.Key].HostID != s.members[k].HostID
		s.send(d, recvNs, nil, other)
	}
	switch {
	case raised:
		s.cnt.ThrottleEvent(ThrottleRaised)
	case len(ds) > 0:
		// Members above their share were cut; k's raise follows the
		// acknowledgements (Redistribute).
		s.cnt.ThrottleEvent(ThrottleTook)
	default:
		s.cnt.ThrottleEvent(ThrottleNoChange)
	}
}

// apply sends a decision to the member's host.
func (s *App) apply(d allocator.Decision, recvNs int64, onApplied func(error)) {
	s.send(d, recvNs, onApplied, true)
}

func (s *App) send(d allocator.Decision, recvNs int64, onApplied func(error), wake bool) {
	m := s.members[d.Key]
	if m == nil {
		if onApplied != nil {
			onApplied(allocator.ErrUnknown)
		}
		return
	}
	if err := s.checkInvariants(d); err != nil {
		// A decision that breaks an invariant never leaves the controller
		// (issue 8: enforced where limits are applied, not only decided).
		s.cnt.BadStat("invariant_violation")
		s.log.Error("decision refused: it would break an invariant", "app", s.Name, "handle", m.Handle, "err", err)
		if onApplied != nil {
			onApplied(err)
		}
		return
	}
	key, gen := d.Key, d.Gen
	u := session.Update{Handle: m.Handle, Gen: d.Gen, QuotaUs: d.QuotaUs, MemLimit: d.MemLimit,
		Received: recvNs, OnApplied: func(err error) {
			s.acked(key, gen, err)
			if onApplied != nil {
				onApplied(err)
			}
		}}
	if d.QuotaUs != 0 {
		u.PeriodUs = s.periodUs
	}
	if wake {
		m.Host.Push(u)
	} else {
		m.Host.Queue(u)
	}
	s.cnt.Decision(string(d.Reason))
	if s.hub.Active() {
		s.hub.Publish(events.Event{Time: time.Now(), App: s.Name, Host: m.HostID, ContainerID: m.ContainerID,
			Handle: m.Handle, Kind: "limits", Generation: d.Gen, CPUQuotaUs: d.QuotaUs, MemoryBytes: d.MemLimit,
			Reason: string(d.Reason)})
	}
}

// acked records a daemon's answer to decision gen of member k on the
// caller's goroutine (a session's reader or sweeper; never with s.mu held:
// the one synchronous call, Queue on a closed session, passes ErrClosed,
// which is not looked at). A cut that was applied frees its share, which
// is handed out at once.
func (s *App) acked(k allocator.Key, gen uint64, err error) {
	var r allocator.AckResult
	switch {
	case err == nil:
		r = allocator.AckApplied
	case errors.Is(err, session.ErrClosed), errors.Is(err, session.ErrTimeout), errors.Is(err, session.ErrNotAcked):
		// Not known whether it was applied: both limits stay counted (a
		// dead session's members are held at the larger, LeaveHeld).
		return
	default:
		r = allocator.AckRefused
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.a.Ack(k, gen, r) {
		s.applyAll(s.a.Redistribute())
	}
}

// checkInvariants is the last check before a decision is sent: the app's
// quotas and outstanding leases sum to at most Ω, a memory raise never
// takes the app's limits past its memory budget, and no quota is below the
// floor (lowered to Ω/λ when Ω cannot give every member the floor, as the
// allocator does). While a revoked lease has not come back (issue 11,
// host-local leases) two things are legitimate and allowed, nothing else:
// a quota below the floor (a newcomer waits for the pool), and Σ quotas +
// Σ leases over a cut Ω (Σ quotas alone must still fit).
func (s *App) checkInvariants(d allocator.Decision) error {
	if d.QuotaUs == 0 && d.MemLimit == 0 {
		return nil
	}
	revoking := s.a.LeaseRevoking()
	if alloc, leased, omega := s.a.CPUAllocatedUs(), s.a.LeasedUs(), s.a.OmegaUs(); d.QuotaUs != 0 {
		if alloc > omega {
			return fmt.Errorf("sum of quotas %d µs over Ω %d µs", alloc, omega)
		}
		if alloc+leased > omega && !revoking {
			return fmt.Errorf("sum of quotas %d µs + leases %d µs over Ω %d µs", alloc, leased, omega)
		}
	}
	if d.MemLimit > 0 {
		if alloc, budget := s.a.MemAllocated(), s.a.Budget().MemoryBytes; alloc > budget {
			return fmt.Errorf("sum of memory limits %d B over the budget %d B", alloc, budget)
		}
	}
	floor := s.a.P.CPUFloorUs
	if n := int64(s.a.Len()); n > 0 {
		floor = min(floor, s.a.OmegaUs()/n)
	}
	if d.QuotaUs > 0 && d.QuotaUs < max(floor, 1) && !revoking {
		return fmt.Errorf("quota %d µs below the floor %d µs", d.QuotaUs, floor)
	}
	return nil
}

func (s *App) applyAll(ds []allocator.Decision) {
	for _, d := range ds {
		s.apply(d, 0, nil)
	}
	if s.a.LeaseFraction() > 0 || s.a.LeasedUs() > 0 {
		s.sendLeases(nil) // revocations the change queued
	}
}

// LeaseUse handles a daemon's CpuLeaseUse: host h raised member k's
// quota by us from lease id. The answer is an ordinary update with the
// quota the controller now counts (reason "lease"), so both views meet.
// bad counts a dropped or clamped use.
func (s *App) LeaseUse(h allocator.HostID, id uint64, k allocator.Key, us int64, bad func(reason string, err error)) {
	s.do(func() {
		d, err := s.a.LeaseUse(h, id, k, us)
		switch err {
		case nil:
			s.cnt.Lease("use")
		case allocator.ErrLeaseOver:
			bad("lease_over", fmt.Errorf("app %s: lease %d use of %d µs beyond the lease", s.Name, id, us))
		default:
			bad("lease_unknown", fmt.Errorf("app %s: lease %d use: %w", s.Name, id, err))
		}
		if d.Gen != 0 {
			s.apply(d, 0, nil)
		}
	})
}

// LeaseReturn handles a daemon's CpuLeaseReturn (the answer to a revoke).
func (s *App) LeaseReturn(h allocator.HostID, id uint64, bad func(reason string, err error)) {
	s.do(func() {
		ds, err := s.a.LeaseReturn(h, id)
		if err != nil {
			bad("lease_unknown", fmt.Errorf("app %s: return of lease %d: %w", s.Name, id, err))
			return
		}
		s.cnt.Lease("return")
		s.applyAll(ds)
	})
}

// HostClosed forgets host h's lease and session (it ended; its members
// leave through Leave).
// The lease stays counted for hold: the daemon may have raised quotas
// from it that nobody has heard of (it was partitioned or stopped).
func (s *App) HostClosed(h allocator.HostID, hold time.Duration) {
	s.do(func() {
		delete(s.hosts, h)
		if us := s.a.LeaseUs(h); us > 0 && hold > 0 {
			id := fmt.Sprintf("lease/%d", h)
			s.a.HoldShare(id, us, 0)
			s.expireHold(id, hold)
		}
		s.applyAll(s.a.LeaseDrop(h))
	})
}

// HoldRaisesFor hands nothing out of the pools for d (allocator
// HoldRaises): the controller just started or took over, and hosts that
// have not rejoined yet may hold what the pools seem to have. Then the
// pools are handed out as usual.
func (s *App) HoldRaisesFor(d time.Duration) {
	s.do(func() {
		s.a.HoldRaises = true
		time.AfterFunc(d, func() {
			s.do(func() {
				s.a.HoldRaises = false
				s.applyAll(s.a.Redistribute())
			})
		})
	})
}

// Holding reports whether the app hands nothing out of its pools now
// (HoldRaisesFor).
func (s *App) Holding() bool {
	var h bool
	s.call(func() { h = s.a.HoldRaises })
	return h
}

// expireHold ends hold id after d unless it was ended or held again.
func (s *App) expireHold(id string, d time.Duration) {
	s.holdSeq++
	seq := s.holdSeq
	s.holds[id] = seq
	time.AfterFunc(d, func() {
		s.do(func() {
			if s.holds[id] == seq { // not rejoined and held again since
				delete(s.holds, id)
				s.a.Unhold(id)
				s.applyAll(s.a.Redistribute())
			}
		})
	})
}

// Join adds a member and bootstraps it (eq. (2)).
func (s *App) Join(mi MemberInfo) error {
	err := ErrRetired // stays so when the app is stopped
	s.call(func() {
		err = nil
		if s.retired {
			err = ErrRetired
			return
		}
		if s.auto {
			b := allocator.Budget{CPUCores: mi.ContribCores, MemoryBytes: mi.ContribMem}
			if len(s.members) > 0 {
				b = s.a.Budget()
				b.CPUCores += mi.ContribCores
				b.MemoryBytes += mi.ContribMem
			}
			if _, e := s.a.SetBudget(b); e != nil {
				err = e
				return
			}
		}
		// The container is back under control: its held share (if its
		// host's last session died) returns with this join.
		s.a.Unhold(holdID(mi.HostID, mi.ContainerID))
		delete(s.holds, holdID(mi.HostID, mi.ContainerID))
		var ds []allocator.Decision
		ds, err = s.a.Join(allocator.Join{Key: mi.Key, HostMaxUs: mi.HostMaxUs, MemUsage: mi.MemUsage,
			CurQuotaUs: mi.CurQuotaUs, CurMem: mi.CurMem})
		if err != nil {
			return
		}
		s.members[mi.Key] = &member{MemberInfo: mi}
		s.hosts[mi.Key.Host()] = mi.Host
		s.applyAll(ds)
		s.publish(mi, "join", "")
	})
	return err
}

// ErrRetired says the app was emptied and forgotten: look it up again.
var ErrRetired = errors.New("app: emptied auto app retired")

// RetireIfEmpty marks an auto app without members as retired (every later
// Join fails with ErrRetired) and reports whether it did: the caller then
// forgets and stops it. Defined apps are never retired.
func (s *App) RetireIfEmpty() bool {
	var ok bool
	s.call(func() {
		if s.auto && len(s.members) == 0 {
			s.retired, ok = true, true
		}
	})
	return ok
}

// Leave removes a member; an auto app shrinks by its contribution.
func (s *App) Leave(k allocator.Key, reason string) {
	s.do(func() { s.leave(k, reason) })
}

func (s *App) leave(k allocator.Key, reason string) {
	{
		m := s.members[k]
		if m == nil {
			return
		}
		ds, _ := s.a.Leave(k)
		delete(s.members, k)
		if s.auto && len(s.members) > 0 {
			b := s.a.Budget()
			b.CPUCores = math.Max(b.CPUCores-m.ContribCores, 0.01)
			b.MemoryBytes = max(b.MemoryBytes-m.ContribMem, 4*allocator.MiB)
			more, _ := s.a.SetBudget(b)
			ds = append(ds, more...)
		}
		s.applyAll(ds)
		s.publish(m.MemberInfo, "leave", reason)
	}
}

// LeaveHeld removes a member whose host's session died and holds its
// share out of the pools for hold (the time its escrad may still apply the
// limits: until it puts Docker's back), or until the container rejoins.
func (s *App) LeaveHeld(k allocator.Key, reason string, hold time.Duration) {
	s.do(func() {
		m := s.members[k]
		if m == nil || s.auto || hold <= 0 { // an auto app shrinks instead
			s.leave(k, reason)
			return
		}
		id := holdID(m.HostID, m.ContainerID)
		ds, _ := s.a.LeaveHeld(k, id)
		delete(s.members, k)
		s.applyAll(ds)
		s.publish(m.MemberInfo, "leave", reason)
		s.expireHold(id, hold)
	})
}

func holdID(host, container string) string { return host + "/" + container }

func (s *App) publish(mi MemberInfo, kind, reason string) {
	if s.hub.Active() {
		s.hub.Publish(events.Event{Time: time.Now(), App: s.Name, Host: mi.HostID, ContainerID: mi.ContainerID,
			Handle: mi.Handle, Kind: kind, Reason: reason})
	}
}

// Define replaces the budget (and params, when given); the app stops being auto.
func (s *App) Define(b allocator.Budget) error {
	var err error
	s.call(func() {
		var ds []allocator.Decision
		ds, err = s.a.SetBudget(b)
		if err == nil {
			s.auto = false
			s.applyAll(ds)
		}
	})
	return err
}

// Usage records a member's memory usage sample.
func (s *App) Usage(k allocator.Key, usage int64) {
	s.do(func() { s.a.Usage(k, usage) })
}

// OOM handles a blocking OOM request (§IV-D-2). The verdict is sent only
// after the daemon acked the raised limit.
func (s *App) OOM(k allocator.Key, requestID uint64, req *pb.OomRequest, received time.Time) {
	s.do(func() { s.oom(oomReq{k, requestID, req, received}, true) })
}

func (s *App) oom(r oomReq, mayReclaim bool) {
	m := s.members[r.key]
	if m == nil {
		return
	}
	want := int64(min(r.req.GetPagesWanted(), 1<<28)) * 4096
	prev := m0(s.a.Member(r.key))
	o := s.a.OOM(r.key, int64(min(r.req.GetUsageBytes(), 1<<50)), int64(min(r.req.GetLimitBytes(), 1<<50)), want,
		mayReclaim && s.reclaiming == 0)
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
	d := o.Decision
	// Callbacks come from session goroutines (or from Push on a closed
	// session, i.e. from this goroutine): hand over asynchronously.
	s.apply(d, 0, func(err error) {
		go s.do(func() {
			mm := s.members[r.key]
			if mm == nil {
				return
			}
			if err != nil {
				s.a.UndoGrant(r.key, d.Gen, max(prev, 0))
				s.verdict(mm, r, false, m0(s.a.Member(r.key)), "limit not applied: "+err.Error())
				return
			}
			s.verdict(mm, r, true, d.MemLimit, o.Reason)
		})
	})
}

func m0(m *allocator.Member) int64 {
	if m == nil {
		return 0
	}
	return m.MemLimit
}

func (s *App) verdict(m *member, r oomReq, granted bool, limit int64, reason string) {
	m.Host.Verdict(r.id, &pb.OomVerdict{Handle: m.Handle, Granted: granted, NewLimitBytes: limit, Reason: reason}, r.received)
	kind := "oom-denied"
	if granted {
		kind = "oom-granted"
	}
	s.cnt.Decision(kind)
	if s.hub.Active() {
		g := granted
		s.hub.Publish(events.Event{Time: time.Now(), App: s.Name, Host: m.HostID, ContainerID: m.ContainerID,
			Handle: m.Handle, Kind: "oom-verdict", MemoryBytes: limit, Granted: &g, Reason: reason})
	}
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
		h := h
		h.Reclaim(byHost[h], margin, func(res *pb.ReclaimResult, err error) {
			go s.do(func() { s.reclaimDone(h, res, err) })
		})
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

func (s *App) afterReclaim() {
	q := s.oomQueue
	s.oomQueue = nil
	for _, r := range q {
		s.oom(r, false)
	}
	s.applyAll(s.a.FillPending())
}

// PeriodicReclaim runs the §IV-C loop once (the server calls it every
// ReclaimEvery). Skipped while a reclaim is in flight.
func (s *App) PeriodicReclaim() {
	s.do(func() {
		if s.reclaiming == 0 && len(s.members) > 0 {
			s.startReclaim(nil)
		}
	})
}

// MemberState is a member's view for snapshots.
type MemberState struct {
	Info                               MemberInfo
	QuotaUs, MemLimit, MemUsage        int64
	LastUsageUs                        int64
	Gen                                uint64
	Periods, Throttles, ThrottleEvents uint64
	OOMRequests, OOMGrants, OOMDenies  uint64
}

// State is an app's view for snapshots.
type State struct {
	Name                     string
	Auto                     bool
	Budget                   allocator.Budget
	Params                   allocator.Params
	Policy                   string
	OmegaUs, CPUAllocatedUs  int64
	CPULeasedUs              int64 // Σ outstanding host-local leases
	CPUHeldUs, MemHeld       int64 // Σ shares held for members of dead hosts
	MemAllocated, MemUnalloc int64
	Members                  []MemberState
	PendingOOMs, Reclaiming  int
}

// Snapshot reads the app's state on its goroutine.
func (s *App) Snapshot() State {
	var st State
	s.call(func() {
		st = State{Name: s.Name, Auto: s.auto, Budget: s.a.Budget(), Params: s.a.P, Policy: s.a.Policy.Name(),
			OmegaUs: s.a.OmegaUs(), CPUAllocatedUs: s.a.CPUAllocatedUs(), CPULeasedUs: s.a.LeasedUs(), MemAllocated: s.a.MemAllocated(),
			MemUnalloc: s.a.MemUnallocated(), PendingOOMs: len(s.oomQueue), Reclaiming: s.reclaiming}
		st.CPUHeldUs, st.MemHeld = s.a.Held()
		for _, m := range s.a.Members() {
			mi := s.members[m.Key]
			if mi == nil {
				continue
			}
			st.Members = append(st.Members, MemberState{Info: mi.MemberInfo, QuotaUs: m.QuotaUs, MemLimit: m.MemLimit,
				MemUsage: m.MemUsage, LastUsageUs: m.LastUsageUs, Gen: m.Gen, Periods: m.Periods, Throttles: m.Throttles,
				ThrottleEvents: m.ThrottleEvents, OOMRequests: m.OOMRequests, OOMGrants: m.OOMGrants, OOMDenies: m.OOMDenies})
		}
	})
	return st
}

func (s *App) String() string { return fmt.Sprintf("app %s", s.Name) }
