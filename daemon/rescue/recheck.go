package rescue

import (
	"context"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/wallclock"
)

// recheck delivers an OOM event for m if it needs a verdict now and none
// is pending (an event swallowed while another was pending, or missed):
// on v1 its tasks wait in an OOM with the killer disabled; on v2 (cgroupfs)
// its usage is above the memory.high brake, so its tasks are throttled —
// after a grant the resumed tasks may already be past the new brake, and
// memory.events' next "high" increment may be long in coming. Nobody is
// left waiting for a verdict that no request asked for.
func (r *Rescuer) recheck(m *Container) {
	if m.pending.Load() || !m.Armed.Load() {
		return
	}
	switch {
	case m.G.Paths.Version == cgroups.V1 && m.G.Has(cgroups.OOMControl):
		var buf [256]byte
		b, err := m.G.Read(cgroups.OOMControl, buf[:])
		if err != nil {
			return
		}
		if v, ok := cgroups.KeyedValue(b, "under_oom"); !ok || v == 0 {
			return
		}
		if v, ok := cgroups.KeyedValue(b, "oom_kill_disable"); !ok || v == 0 {
			return // released: the kernel OOM killer handles it
		}
	case m.G.Paths.Version == cgroups.V2 && m.G.Has(cgroups.MemHigh) && r.cfg.StockOOM:
		high, err := m.G.ReadInt(cgroups.MemHigh)
		if err != nil || high == cgroups.Max {
			return // no brake (unlimited, or released after a denial)
		}
		if u, err := m.G.ReadInt(cgroups.MemUsage); err != nil || u <= high {
			return
		}
	default:
		return
	}
	// Pages stays 0: a group found under OOM says nothing of the charge.
	ev := Event{Handle: m.H, At: time.Now()}
	if u, err := m.G.ReadInt(cgroups.MemUsage); err == nil && u > 0 {
		ev.Usage = uint64(u)
	}
	ev.Limit, _ = m.G.ReadInt(cgroups.MemLimit)
	r.OOM(ev)
}

// Watchdog rechecks every trapped group now and then, and lets the
// source set released traps again (v1 oom_kill_disable, v2 brakes),
// until ctx ends. Only the stock-kernel backends need it.
func (r *Rescuer) Watchdog(ctx context.Context) {
	t := wallclock.NewTicker(2 * time.Second) // with a period's sample (wallclock)
	defer t.Stop()
	f, _ := r.src.(Maintainer)
	r.beat.Store(time.Now().UnixNano())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Next()
		r.beat.Store(time.Now().UnixNano())
		for _, m := range r.list() {
			if f != nil && m.Armed.Load() && !m.pending.Load() {
				f.Maintain(m.H)
			}
			r.recheck(m)
		}
	}
}

// LastRound is when the watchdog last ran (zero before it started):
// escrad's systemd watchdog stops petting when it falls behind.
func (r *Rescuer) LastRound() time.Time {
	if ns := r.beat.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
