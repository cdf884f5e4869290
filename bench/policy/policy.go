// Package policy drives a baseline recommender (controller/recommender)
// against live containers: it feeds the sampler's 100 ms snapshots to one
// recommender per container, asks for limits every recommender interval
// and applies changed limits through an Applier. The benchmark gives the
// baselines the same apply path as Escra so only the policy differs
// (the benchmark's Escra path); CgroupApplier is that path without the daemon: a direct write
// of the cgroup files, which is what escrad's fast path does.
package policy

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/escra-dev/escra/bench/sampler"
	"github.com/escra-dev/escra/controller/recommender"
	"github.com/escra-dev/escra/daemon/cgroups"
)

// Applier sets a container's limits.
type Applier interface {
	Apply(id string, l recommender.Limits) error
}

// CPUPeriodUs is the CFS period the limits are expressed in (the Escra paper: 100 ms).
const CPUPeriodUs = 100000

// MinQuotaUs is the kernel's smallest CFS quota.
const MinQuotaUs = 1000

// CgroupApplier writes cpu.cfs_quota_us / memory.limit_in_bytes (or v2
// cpu.max / memory.max) of the container's cgroup directly.
type CgroupApplier struct {
	Groups func(id string) (*cgroups.Group, bool)
	// Burst keeps each container's CFS burst at this share of every quota
	// written, as escrad --cfs-burst does for Escra (0: bursts untouched).
	Burst float64
}

func (a CgroupApplier) Apply(id string, l recommender.Limits) error {
	g, ok := a.Groups(id)
	if !ok || g == nil {
		return fmt.Errorf("policy: no cgroup for %s", id)
	}
	var errs []error
	if l.CPU > 0 {
		q := int64(math.Max(MinQuotaUs, math.Round(l.CPU*CPUPeriodUs)))
		if err := SetQuota(g, q, a.Burst); err != nil {
			errs = append(errs, fmt.Errorf("cpu quota %d µs: %w", q, err))
		}
	}
	if l.MemBytes > 0 {
		// Round up to a page; the kernel refuses (EBUSY) a limit below what
		// it cannot reclaim, which the caller counts as a failed change.
		b := (int64(l.MemBytes) + 4095) &^ 4095
		if err := g.WriteInt(cgroups.MemLimit, b); err != nil {
			errs = append(errs, fmt.Errorf("memory limit %d: %w", b, err))
		}
	}
	return errors.Join(errs...)
}

// SetQuota writes quota q µs per CPUPeriodUs to g, with a CFS burst of
// burst × q beside it when burst > 0.
func SetQuota(g *cgroups.Group, q int64, burst float64) error {
	if burst <= 0 || !g.Has(cgroups.CPUBurst) {
		return g.SetCPULimit(q, CPUPeriodUs)
	}
	cur, err := g.ReadInt(cgroups.CPUBurst)
	if err != nil {
		return err
	}
	return g.SetCPULimitBurst(q, CPUPeriodUs, int64(burst*float64(q)), cur)
}

// Runner runs one recommender per container.
type Runner struct {
	Applier Applier
	// New makes the recommender of one container.
	New func(id string) recommender.Recommender
	// Warmup keeps the container's initial limits until the recommender
	// has seen this much history (a recommender in production starts
	// from the user's limits, not from one idle second).
	Warmup time.Duration

	mu      sync.Mutex
	recs    map[string]*state
	Changes int // limit writes that succeeded (CPU and memory counted once per apply)
	Errors  int
	LastErr error
}

type state struct {
	rec     recommender.Recommender
	next    time.Time
	applied recommender.Limits
	started bool
	lastMem float64
	first   time.Time
}

// changed ignores differences below 1 % (and below one quota/page step),
// so a recommender that repeats itself is not counted as changing limits.
func changed(a, b recommender.Limits) bool {
	d := func(x, y, step float64) bool {
		return math.Abs(x-y) > math.Max(step, 0.01*math.Max(math.Abs(x), math.Abs(y)))
	}
	return d(a.CPU, b.CPU, float64(MinQuotaUs)/CPUPeriodUs) || d(a.MemBytes, b.MemBytes, 4096)
}

// OnSample observes one snapshot and applies limits that are due.
func (r *Runner) OnSample(s sampler.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recs == nil {
		r.recs = map[string]*state{}
	}
	for _, c := range s.Per {
		st := r.recs[c.ID]
		if st == nil {
			st = &state{rec: r.New(c.ID)}
			r.recs[c.ID] = st
		}
		if !c.Valid {
			continue
		}
		st.lastMem = c.MemUsage
		st.rec.Observe(recommender.Sample{T: s.T, CPU: c.CPUUsage, MemBytes: c.MemUsage})
		if st.first.IsZero() {
			st.first = s.T
		}
		if s.T.Sub(st.first) < r.Warmup {
			continue
		}
		if st.started && (st.rec.Interval() <= 0 || s.T.Before(st.next)) {
			continue
		}
		l, ok := st.rec.Recommend(s.T)
		if !ok {
			continue
		}
		st.next = s.T.Add(st.rec.Interval())
		if st.started && !changed(l, st.applied) {
			continue
		}
		if err := r.Applier.Apply(c.ID, l); err != nil {
			r.Errors++
			r.LastErr = err
			continue
		}
		st.started, st.applied = true, l
		r.Changes++
	}
}

// OnOOM tells the container's recommender about an OOM kill.
func (r *Runner) OnOOM(id string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.recs[id]; st != nil {
		st.rec.ObserveOOM(t, math.Max(st.lastMem, st.applied.MemBytes))
	}
}

// Applied returns the limits last applied to a container.
func (r *Runner) Applied(id string) (recommender.Limits, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.recs[id]
	if st == nil || !st.started {
		return recommender.Limits{}, false
	}
	return st.applied, true
}
