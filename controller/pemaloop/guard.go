package pemaloop

import (
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/pema"
)

// Check is pema-guarded's look inside the interval (PEMA §6: "catching
// the SLO violations early, and rolling back configuration to mitigate
// it"): the p95 of the requests the proxy completed in the last
// FastWindow, since the interval began. Over the SLO with FastMin
// requests or more, PEMA rolls back at once (pema.Manager.Violation) and a
// new interval starts. It reports whether it rolled back; the loop's
// goroutine calls it every FastEvery (exported for tests).
func (l *Loop) Check() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mg == nil || l.cfg.PEMA.Guard == nil {
		return false
	}
	now := time.Now()
	span := min(now.Sub(l.begin), l.cfg.FastWindow)
	if span < l.cfg.FastWindow/2 {
		return false // too few of the requests are the allocation's own yet
	}
	p, n := l.proxy.Recent(l.begin)
	if n < l.cfg.FastMin || p.Seconds() <= l.slo {
		return false
	}
	rps := float64(n) / span.Seconds()
	s, err := l.mg.Violation(p.Seconds(), rps)
	if err != nil {
		l.log.Warn("pema-guarded rollback failed", "err", err)
		return false
	}
	if s.Kind == pema.KindLearn {
		return false // Eq 9's m is being fitted: the allocation is held
	}
	rec := Record{Time: now, P95: p.Seconds(), RPS: rps, Requests: n, Kind: s.Kind, Range: s.Range, Violate: true,
		Fast: true, SLOSecond: l.slo, X: map[string]float64{}}
	tg := make(map[allocator.Key]int64, len(l.keys))
	for i, k := range l.keys {
		tg[k] = int64(s.X[i] * l.perUs)
		rec.X[l.names[i]] = s.X[i]
		rec.TotalCPU += s.X[i]
	}
	l.tg.Set(tg)
	// The next interval measures the new allocation only.
	l.proxy.Take()
	l.tg.Take()
	l.begin = now
	if len(l.recs) < 100000 {
		l.recs = append(l.recs, rec)
	}
	l.log.Info("pema-guarded rollback inside the interval", "kind", s.Kind, "p95_ms", p.Seconds()*1000, "requests", n,
		"range", s.Range, "total_cpu", rec.TotalCPU)
	return true
}
