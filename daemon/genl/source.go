package genl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/oom"
	"github.com/escra-dev/escra/daemon/telemetry"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"golang.org/x/sys/unix"
)

// Source is escrad's kernel backend (telemetry.Source) over escra.ko:
// per-period records taken in the scheduler (seed 000 §IV-B) and OOM
// requests from page faults that hit memory.max (the faulting task waits
// for the verdict at the end of the fault). Wire it with
// agent.Config.KernelSource = genl.NewSource. It sends no throttle events
// (CpuStat.mid_period) yet: the cgroupfs backend's watcher polls cpu.stat,
// and the module would report the throttle from the scheduler instead;
// --throttle-poll does not apply here.
type Source struct {
	events *Conn  // the telemetry group only
	ctl    *Owner // owns the watches; OOM requests come here, not with telemetry
	log    *slog.Logger

	mu      sync.Mutex
	byID    map[uint64]*watched // cgroup v2 id
	byH     map[uint32]uint64
	pending map[uint32]*pendingOOM // handle -> requests awaiting a verdict
	buf     [512]byte              // UsageProbe reads, under mu
}

// pendingOOM is what the kernel waits for in one group.
type pendingOOM struct {
	ids       []uint64
	ev        oom.Event
	delivered time.Time
}

// redeliverAfter: a request still unanswered this long after its event
// went to the sink is handed over again. The agent ignores events for a
// group with a verdict in flight, so a request that arrives just as a
// verdict is being applied would otherwise wait for the kernel timeout.
const redeliverAfter = 20 * time.Millisecond

type watched struct {
	h uint32
	seqState
	probe UsageProbe
}

// NewSource opens the escra family; ErrNoFamily when escra.ko is absent
// (stock kernel), which makes --backend auto fall back to cgroupfs.
func NewSource(period time.Duration, log *slog.Logger) (telemetry.Source, error) {
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
	s.byID[id] = &watched{h: h, probe: UsageProbe{G: g}}
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
func (s *Source) Run(ctx context.Context, sink telemetry.Sink) error {
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
					s.mu.Lock()
					w, ok := s.byID[r.CgroupID]
					if ok {
						w.probe.Measure(&r, s.buf[:])
						w.fill(&st, r)
						st.Handle = w.h
					}
					s.mu.Unlock()
					if ok {
						sink.CPU(&st)
					}
				}
			}
			sink.Flush()
		}
	}
}

func (s *Source) oom(req OOMRequest, sink telemetry.Sink) {
	now := time.Now()
	s.mu.Lock()
	w, ok := s.byID[req.CgroupID]
	var ev oom.Event
	deliver := false
	if ok {
		ev = oom.Event{Handle: w.h, At: now, Usage: req.UsageBytes, Limit: int64(req.MaxBytes)}
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
func (s *Source) redeliver(sink telemetry.Sink) {
	now := time.Now()
	var evs []oom.Event
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
func (s *Source) Resolve(ev oom.Event, granted bool, newLimit int64) error {
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
		if err := s.ctl.ReplyOOM(id, granted); err != nil && !errors.Is(err, unix.ENOENT) && first == nil {
			first = err
		}
	}
	return first
}

// seqState turns the kernel's records into the daemon's period sequence.
// An idle group's period timer stops, so the kernel sends nothing for idle
// periods; the elapsed time since the previous record says how many
// periods passed, and the skipped sequence numbers are the idle (fully
// unused) periods — the same gaps the cgroupfs backend leaves.
type seqState struct {
	started     bool
	seq         uint64
	lastTs      uint64
	lastThrotNs uint64
}

func (w *seqState) fill(st *pb.CpuStat, r Record) {
	step := uint64(1)
	if w.started && r.TimestampNs > w.lastTs && r.PeriodNs > 0 {
		step = (r.TimestampNs - w.lastTs + r.PeriodNs/2) / r.PeriodNs
		if step == 0 {
			step = 1
		}
	}
	var throttledNs uint64
	if w.started {
		w.seq += step
		if r.ThrottledNs >= w.lastThrotNs {
			throttledNs = r.ThrottledNs - w.lastThrotNs
		}
	} else {
		w.seq, w.started = 0, true // the protocol counts from 0 at registration
	}
	w.lastTs, w.lastThrotNs = r.TimestampNs, r.ThrottledNs
	used := int64(r.QuotaNs) - int64(r.UnusedNs)
	if used < 0 {
		used = 0 // burst: more than the quota was left
	}
	unusedNs := r.UnusedNs
	if r.HasUsed {
		used = int64(min(r.UsedNs, 1<<62))
		if r.QuotaNs > 0 {
			unusedNs = uint64(max(int64(r.QuotaNs)-used, 0))
		}
	}
	st.Reset()
	st.PeriodSeq = w.seq
	st.QuotaUs = int64(r.QuotaNs / 1000)
	st.PeriodUs = uint32(r.PeriodNs / 1000)
	st.UnusedUs = int64(unusedNs / 1000)
	st.Throttled = r.Throttled
	st.NrThrottled = uint64(r.NrThrottled)
	st.ThrottledUs = throttledNs / 1000 // per period, as cpu.stat deltas
	st.UsageUs = uint64(used / 1000)
}
