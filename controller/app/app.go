// Package app runs the Distributed Containers of Escra (§III, §IV-A,
// §IV-C): one goroutine per app owns its allocator.Books, so decisions
// for one app are serialized and a storm in one app never delays another.
// It carries the allocator's decisions out through the hosts' sessions;
// no lock is held across network I/O (sessions queue, their writers send).
package app

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
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
	// Lease sends a CpuLease grant or revoke (host-local leases).
	Lease(l *pb.CpuLease)
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
	// queued counts closures handed to do and not yet run: work taken on
	// the caller's goroutine (OOM) waits for them, so one session's
	// messages are still decided in the order they came.
	queued atomic.Int64
	// While deferWake is set (a caller deciding on its own goroutine),
	// send queues updates and notes their hosts in wakeHosts; the caller
	// wakes them once it has let go of mu.
	deferWake bool
	wakeHosts []Host
	grantLogs []grantLog

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
	// Host id of each session that had members (memcredit.go).
	sessionHosts map[allocator.HostID]string
	// Recommend mode (mode.go) and the members' caps by name.
	recommend bool
	caps      func(name string) Caps

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
	// acknowledged the cut (acknowledged accounting, allocator/applied.go).
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
	var tick <-chan struct{}
	if s.a.LeaseFraction() > 0 || s.a.MemCreditFraction() > 0 {
		ch, stop := sharedClock.subscribe(s.a.P.Period)
		defer stop()
		tick = ch
	}
	for {
		select {
		case <-s.done:
			return
		case f := <-s.in:
			s.mu.Lock()
			f()
			s.queued.Add(-1)
			s.mu.Unlock()
		case <-tick:
			s.mu.Lock()
			if s.recommend {
				// Nothing is lent in recommend mode (leases raise quotas
				// on the hosts); what was lent before comes back.
				if s.a.LeasedUs() > 0 {
					s.sendLeases(s.a.RebalanceLeases(0))
				}
			} else if len(s.members) > 0 || s.a.LeasedUs() > 0 {
				s.sendLeases(s.a.RebalanceLeases(s.a.LeaseFraction()))
			}
			s.rebalanceCredit() // host-local memory credit (memcredit.go)
			s.mu.Unlock()
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
	s.queued.Add(1)
	select {
	case s.in <- f:
	case <-s.done:
		s.queued.Add(-1)
	}
}

// lockInline takes mu for work decided on the caller's goroutine. It
// reports false (mu not held) when that work must go through do instead:
// the app stopped, or closures queued before it have not run yet.
func (s *App) lockInline() bool {
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return false
	default:
	}
	if s.queued.Load() > 0 {
		s.mu.Unlock()
		return false
	}
	s.deferWake = true
	return true
}

// unlockInline lets go of mu and then wakes the hosts that updates were
// queued for, so they go out with one write from the caller's goroutine.
func (s *App) unlockInline() {
	var buf [4]Host
	hosts := append(buf[:0], s.wakeHosts...)
	clear(s.wakeHosts)
	s.wakeHosts = s.wakeHosts[:0]
	var logs []grantLog
	if len(s.grantLogs) > 0 {
		logs, s.grantLogs = s.grantLogs, nil
	}
	s.deferWake = false
	s.mu.Unlock()
	for _, h := range hosts {
		h.Wake()
	}
	for _, g := range logs {
		s.logGrant(g)
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

func (s *App) String() string { return fmt.Sprintf("app %s", s.Name) }
