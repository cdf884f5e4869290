package kmod

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"golang.org/x/sys/unix"
)

// Source is escrad's kernel backend (source.Source) over escra.ko:
// per-period records taken in the scheduler (Escra §IV-B) and OOM
// requests from page faults that hit memory.max (the faulting task waits
// for the verdict at the end of the fault). Wire it with
// agent.Config.KernelSource = kmod.NewSource. On a kernel with throttle
// events (patch 4 of the series) the scheduler reports a throttle, and a
// pool nearly spent, when it happens; they become CpuStat.mid_period
// events for the period in progress, as the bpf backend sends them and
// the cgroupfs watcher's poll finds them (nothing here polls).
type Source struct {
	events *Conn  // the telemetry group only
	ctl    *Owner // owns the watches; OOM requests come here, not with telemetry
	log    *slog.Logger

	mu      sync.Mutex
	byID    map[uint64]*watched // cgroup v2 id
	byH     map[uint32]uint64
	pending map[uint32]*pendingOOM // handle -> requests awaiting a verdict
	buf     [512]byte              // UsageProbe reads, under mu

	noThrottleEvents atomic.Bool
}

// NearParam is the module parameter that sets the near-throttle threshold
// (permille of the quota used; 0: throttle events only).
const NearParam = "/sys/module/escra/parameters/throttle_near_permille"

// SetThrottleEvents turns the throttle events (CpuStat.mid_period) on or
// off; on by default.
func (s *Source) SetThrottleEvents(on bool) { s.noThrottleEvents.Store(!on) }

// SetThrottleNear sets the share of its quota a group may use within a
// period before the module sends a near event (0: none). The threshold is
// module-wide: it applies to every socket's watches.
func (s *Source) SetThrottleNear(share float64) error {
	return setNear(NearParam, share)
}

func setNear(path string, share float64) error {
	if !(share >= 0 && share <= 1) {
		return fmt.Errorf("kernel backend: throttle-near %v: want 0..1", share)
	}
	// The module takes 0..999: a group at 100 % is throttled already.
	pm := min(int(math.Round(share*1000)), 999)
	// A parameter file is never created: its absence means no events.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return errors.New("kernel backend: this escra.ko or kernel has no throttle events (patch 4 of the series)")
	}
	if err == nil {
		_, err = f.Write([]byte(strconv.Itoa(pm)))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("kernel backend: throttle-near: %w", err)
	}
	return nil
}

// pendingOOM is what the kernel waits for in one group.
type pendingOOM struct {
	ids       []uint64
	ev        rescue.Event
	delivered time.Time
}

// redeliverAfter: a request still unanswered this long after its event
// went to the sink is handed over again. The agent ignores events for a
// group with a verdict in flight, so a request that arrives just as a
// verdict is being applied would otherwise wait for the kernel timeout.
const redeliverAfter = 20 * time.Millisecond

type watched struct {
	h     uint32
	seq   source.SeqState
	probe source.UsageProbe
}

// NewSource opens the escra family; ErrNoFamily when escra.ko is absent
// (stock kernel), which makes --backend auto fall back to cgroupfs.
func NewSource(period time.Duration, log *slog.Logger) (source.Source, error) {
	ev, err := Dial()
	if err != nil {
		return nil, err
	}
	ctl, err := DialOwner()
	if err != nil {
		ev.Close()
		return nil, err
	}
	_ = ev.SetReadBuffer(4 << 20)
	if err := ev.Join(GroupTelemetry); err != nil {
		ev.Close()
		ctl.Close()
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Source{events: ev, ctl: ctl, log: log, byID: map[uint64]*watched{},
		byH: map[uint32]uint64{}, pending: map[uint32]*pendingOOM{}}, nil
}

// Backend reports the kernel backend.
func (s *Source) Backend() pb.Backend { return pb.Backend_BACKEND_KERNEL }

// CgroupID is the cgroup v2 id of a directory: its inode number.
func CgroupID(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Watch asks the module to report the group (cgroup v2 only).
func (s *Source) Watch(h uint32, g *cgroups.Group) error {
	if g.Paths.Version != cgroups.V2 || g.Paths.Unified == "" {
		return errors.New("kernel backend: needs a cgroup v2 group")
	}
	id, err := CgroupID(g.Paths.Unified)
	if err != nil {
		return fmt.Errorf("kernel backend: cgroup id of %s: %w", g.Paths.Unified, err)
	}
	if err := s.ctl.Watch(id); err != nil {
		return err
	}
	s.mu.Lock()
	s.byID[id] = &watched{h: h, probe: source.UsageProbe{G: g}}
	s.byH[h] = id
	s.mu.Unlock()
	return nil
}

// Unwatch stops reporting the group; pending OOM requests are denied.
func (s *Source) Unwatch(h uint32) {
	s.mu.Lock()
	id, ok := s.byH[h]
	delete(s.byH, h)
	delete(s.byID, id)
	s.mu.Unlock()
	if ok {
		_ = s.ctl.Unwatch(id)
	}
	s.reply(h, false)
}

// Run delivers records and OOM events until ctx ends. Telemetry and OOM
// requests arrive on separate sockets; the sink is called from this
// goroutine only.
func (s *Source) Run(ctx context.Context, sink source.Sink) error {
	defer s.events.Close()
	defer s.ctl.Close()
	type batch struct {
		evs []Event
		err error
	}
	tel := make(chan batch, 64)
	go func() {
		for {
			evs, err := s.events.Receive()
			select {
			case tel <- batch{evs, err}:
			case <-ctx.Done():
				return
			}
			if err != nil && !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, ErrMalformed) {
				return
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = s.events.SetReadDeadline(time.Now()) })
	defer stop()
	tick := time.NewTicker(redeliverAfter)
	defer tick.Stop()
	var st pb.CpuStat
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			s.redeliver(sink)
		case req, ok := <-s.ctl.Requests():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("kernel backend: owner socket closed")
			}
			s.oom(req, sink)
		case b := <-tel:
			if b.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(b.err, unix.ENOBUFS) || errors.Is(b.err, ErrMalformed) {
					// Lost or bad records: the next ones carry on (seq shows the gap).
					s.log.Warn("kernel telemetry", "err", b.err)
					continue
				}
				return fmt.Errorf("kernel backend: receive: %w", b.err)
			}
			for _, ev := range b.evs {
				for _, r := range ev.Records {
					// The sink runs unlocked: it may call back (Unwatch).
					if s.fill(&st, r) {
						sink.CPU(&st)
					}
				}
			}
			sink.Flush()
		}
	}
}

// fill turns a record of a watched group into st; false when there is
// nothing to send (unwatched group, events off, a kind this escrad does
// not know).
func (s *Source) fill(st *pb.CpuStat, r source.Record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.byID[r.CgroupID]
	if !ok {
		return false
	}
	switch r.Kind {
	case source.KindPeriod:
		w.probe.Measure(&r, s.buf[:])
		w.seq.Fill(st, r)
		st.Handle = w.h
	case source.KindThrottle, source.KindNear:
		if s.noThrottleEvents.Load() {
			return false
		}
		w.seq.FillEvent(st, w.h, r)
	default:
		return false
	}
	return true
}

func (s *Source) oom(req OOMRequest, sink source.Sink) {
	now := time.Now()
	s.mu.Lock()
	w, ok := s.byID[req.CgroupID]
	var ev rescue.Event
	deliver := false
	if ok {
		ev = rescue.Event{Handle: w.h, At: now, Usage: req.UsageBytes, Limit: int64(req.MaxBytes), Pages: uint64(req.NrPages)}
		p := s.pending[w.h]
		if p == nil {
			// First request of an episode: the agent decides for all.
			p = &pendingOOM{ev: ev, delivered: now}
			s.pending[w.h] = p
			deliver = true
		}
		p.ids = append(p.ids, req.ID)
	}
	s.mu.Unlock()
	if !ok {
		_ = s.ctl.ReplyOOM(req.ID, false)
		return
	}
	if deliver {
		sink.OOM(ev)
	}
}

// redeliver hands stale unanswered events to the sink again.
func (s *Source) redeliver(sink source.Sink) {
	now := time.Now()
	var evs []rescue.Event
	s.mu.Lock()
	for _, p := range s.pending {
		if now.Sub(p.delivered) >= redeliverAfter {
			p.delivered = now
			p.ev.At = now
			evs = append(evs, p.ev)
		}
	}
	s.mu.Unlock()
	for _, ev := range evs {
		sink.OOM(ev)
	}
}

// Resolve answers every pending request of the event's group: granted
// means the daemon already raised memory.max, so each blocked charge may
// retry. A request that already timed out in the kernel (ENOENT) is fine.
func (s *Source) Resolve(ev rescue.Event, granted bool, newLimit int64) error {
	return s.reply(ev.Handle, granted)
}

func (s *Source) reply(h uint32, granted bool) error {
	s.mu.Lock()
	var ids []uint64
	if p := s.pending[h]; p != nil {
		ids = p.ids
	}
	delete(s.pending, h)
	s.mu.Unlock()
	var first error
	for _, id := range ids {
		err := s.ctl.ReplyOOM(id, granted)
		if errors.Is(err, unix.ENOENT) {
			// The module's oom_timeout_ms passed first: it forgot the
			// request. A denial then changes nothing; a grant is late.
			if !granted {
				continue
			}
			err = rescue.ErrLate
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}
