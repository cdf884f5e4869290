package rescue

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// OOM asks the controller for memory, and makes sure the group is
// resolved one way or the other within the deadline (source.Sink.OOM).
func (r *Rescuer) OOM(ev Event) {
	m := r.get(ev.Handle)
	if m == nil {
		return
	}
	if !m.pending.CompareAndSwap(false, true) {
		// The tasks that resumed after a raise can hit the new limit
		// before the previous request is resolved: look again then.
		m.again.Store(true)
		return
	}
	r.cfg.Metrics.Events.Inc()
	m.mu.Lock()
	m.at, m.limit, m.rescued = ev.At, ev.Limit, false
	m.mu.Unlock()
	var once sync.Once
	var done atomic.Bool
	var timer *time.Timer
	fromCredit := false // set before any goroutine can resolve
	resolve := func(granted bool, limit int64, why string) {
		once.Do(func() {
			done.Store(true)
			if timer != nil {
				timer.Stop()
			}
			if granted {
				r.LimitRaised(m, limit)
				r.countVia(fromCredit, why)
				if why == "" {
					why = "granted"
				}
				r.cfg.Metrics.Outcome.WithLabelValues(why).Inc()
			} else {
				r.cfg.Metrics.Outcome.WithLabelValues(why).Inc()
				if m.G.Paths.Version == cgroups.V2 && r.cfg.StockOOM {
					r.log.Warn("memory not granted: memory.high brake released, the kernel acts at memory.max", "name", m.Name, "why", why)
				} else {
					r.log.Warn("OOM not rescued: kernel OOM killer re-enabled", "name", m.Name, "why", why)
				}
			}
			if err := r.src.Resolve(ev, granted, limit); errors.Is(err, ErrLate) && granted {
				r.late(m, "the kernel's wait was over before the reply (escra.ko oom_timeout_ms)", limit)
			} else if err != nil {
				r.log.Warn("resolving OOM", "name", m.Name, "err", err)
			}
			m.pending.Store(false)
			if m.again.Swap(false) {
				r.recheck(m)
			}
		})
	}
	// raised reports whether the limit is above the one that was hit (a
	// grant applied through the verdict or a SetLimits).
	raised := func() (int64, bool) {
		cur, _ := m.Mem.Current()
		return cur.MemoryBytes, ev.Limit > 0 && (cur.MemoryBytes == cgroups.Max || cur.MemoryBytes > ev.Limit)
	}
	if r.cfg.Credit != nil && r.link.Connected() {
		// Host-local memory credit: answered here, the use reported to
		// the controller through the session's writer.
		if lim, ok := r.cfg.Credit.Grant(m, ev); ok {
			fromCredit = true
			resolve(true, lim, "")
			return
		}
	}
	req := &pb.OomRequest{Handle: m.H, UsageBytes: ev.Usage, LimitBytes: uint64(max(ev.Limit, 0)), PagesWanted: ev.Pages}
	// outage answers locally when no controller can (outage.go); why is
	// the outcome when it cannot raise either.
	outage := func(why string) {
		if lim, ok := raised(); ok {
			resolve(true, lim, "")
			return
		}
		if lim, ok := r.raiseToCeiling(m, ev); ok {
			resolve(true, lim, "outage_raised")
			return
		}
		resolve(false, 0, why)
	}
	// The request stays pending past the deadline (no Cancel): a verdict
	// after it is counted as late, not dropped unseen. The session ending
	// forgets it.
	timer = time.AfterFunc(r.cfg.Deadline, func() {
		if lim, ok := raised(); ok {
			resolve(true, lim, "")
			return
		}
		if !r.link.Connected() {
			outage("deadline")
			return
		}
		resolve(false, 0, "deadline")
	})
	_, err := r.link.RequestOOM(req, func(v *pb.OomVerdict) {
		if done.Load() {
			if v != nil && v.Granted {
				r.late(m, "the controller's verdict came after --oom-deadline", v.NewLimitBytes)
			}
			return
		}
		switch {
		case v == nil:
			outage("controller_lost")
		case v.Granted:
			if lim, ok := raised(); ok {
				// The grant's SetLimits came first (the controller sends
				// it ahead of the verdict on the same stream, and the
				// session's reader applies it before reading on). Writing the
				// verdict's limit again could undo a reclaim the
				// controller sent in between and has counted (the sum
				// applied would exceed the host's memory budget).
				resolve(true, lim, "")
				return
			}
			lim, err := r.lim.RaiseMemory(m.H, v.NewLimitBytes)
			if err != nil {
				r.log.Warn("raising memory limit failed", "name", m.Name, "err", err)
				resolve(false, 0, "write_failed")
				return
			}
			if _, ok := raised(); ok {
				resolve(true, lim, "")
			} // else: wait for a SetLimits raise until the deadline
		default:
			resolve(false, 0, "denied")
		}
	})
	if err != nil {
		outage("controller_unreachable")
	}
}

func (r *Rescuer) countVia(fromCredit bool, why string) {
	if r.cfg.Metrics.Via == nil {
		return
	}
	via := "controller"
	switch {
	case fromCredit:
		via = "credit"
	case why == "outage_raised":
		via = "outage"
	}
	r.cfg.Metrics.Via.WithLabelValues(via).Inc()
}

// LimitRaised records the rescue moment of a pending OOM when its limit
// has just been raised above the one it hit (by a SetLimits or a verdict).
func (r *Rescuer) LimitRaised(m *Container, limit int64) {
	if !m.pending.Load() {
		return
	}
	m.mu.Lock()
	if m.rescued || m.at.IsZero() || (limit != cgroups.Max && limit <= m.limit) {
		m.mu.Unlock()
		return
	}
	m.rescued = true
	at, hit := m.at, m.limit
	m.mu.Unlock()
	returned := time.Since(at)
	issued := returned
	if w := m.Mem.MemoryWriteIssued(); w.After(at) {
		issued = w.Sub(at)
	}
	r.cfg.Metrics.Rescue.Observe(issued.Seconds())
	// The system's signature event (Escra §IV-B): one info line, so an
	// operator who sees Docker's OOMKilled flag can tell it was survived.
	attrs := []any{"name", m.Name, "app", m.App, "limit_hit_bytes", hit, "time_to_grant", issued}
	if limit == cgroups.Max {
		attrs = append(attrs, "new_limit", "max")
	} else {
		attrs = append(attrs, "new_limit_bytes", limit, "granted_bytes", limit-hit)
	}
	r.log.Info("OOM rescued: memory limit raised", attrs...)
	if r.cfg.OnRescue != nil {
		r.cfg.OnRescue(issued, returned)
	}
}
