// Package pemaloop runs PEMA (controller/pema) as the "pema"
// allocator policy of an app: every interval it reads the app's p95 and
// request rate from the reverse proxy it owns, each member's CPU
// utilisation and throttling from the per-period telemetry the
// allocator already receives (allocator.Targets), takes one PEMA step
// and sets the members' target quotas, which the allocator sends to
// escrad within a period. As "pema-guarded" (PEMA.Guard set) it also
// watches a sliding p95 of the same proxy (guard.go) and rolls back
// inside the interval.
package pemaloop

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/pema"
)

// Defaults: 20 s between steps with at least 2,000 requests (the paper's
// 2 minutes scaled to this machine).
const (
	DefaultInterval    = 20 * time.Second
	DefaultMinRequests = 2000
	// pema-guarded: the sliding p95 is over the last 2 s (PEMA §6 asks for
	// "higher resolution performance monitoring (e.g., within 10
	// seconds)"), checked every 250 ms, with at least 40 requests in it.
	DefaultFastWindow = 2 * time.Second
	DefaultFastEvery  = 250 * time.Millisecond
	DefaultFastMin    = 40
)

// Config is one app's PEMA loop.
type Config struct {
	App      string
	Interval time.Duration // paper: 2 min; here 15–30 s
	// MinRequests: an interval with fewer requests is not a step (its p95
	// is noise); the allocation is held.
	MinRequests int
	PEMA        pema.Config
	Ranges      pema.RangeConfig
	Seed        uint64
	Listen      string // the proxy's address
	Upstream    string // the app's entry service
	// FastWindow, FastEvery, FastMin: pema-guarded's sliding p95 (0: the
	// defaults when PEMA.Guard is set; unused otherwise).
	FastWindow, FastEvery time.Duration
	FastMin               int
}

// Validate checks what the loop needs beyond pema.Config.
func (c Config) Validate() error {
	if c.Interval < 100*time.Millisecond || c.Interval > time.Hour {
		return fmt.Errorf("pema interval %v: want 100ms..1h", c.Interval)
	}
	if c.MinRequests < 0 {
		return errors.New("pema min requests: want >= 0")
	}
	if c.Listen == "" || c.Upstream == "" {
		return errors.New("pema: the proxy needs listen and upstream addresses")
	}
	return c.PEMA.Validate()
}

// App is what the loop reads of the app (*app.App).
type App interface{ Snapshot() app.State }

// Record is one interval, for logs, tests and the benchmark.
type Record struct {
	Time     time.Time          `json:"time"`
	P95      float64            `json:"p95_s"`
	RPS      float64            `json:"rps"`
	Requests int                `json:"requests"`
	Errors   int                `json:"errors"`
	Kind     pema.Kind          `json:"kind"`
	Range    int                `json:"range"`
	X        map[string]float64 `json:"x"` // cores per member name, as decided
	TotalCPU float64            `json:"total_cpu"`
	Violate  bool               `json:"violate"`
	Cut      []string           `json:"cut,omitempty"`
	Skipped  string             `json:"skipped,omitempty"`
	// U, H: the observation the step used (utilisation, throttled share
	// of periods), so a recording can be replayed (Replay).
	U         map[string]float64 `json:"u,omitempty"`
	H         map[string]float64 `json:"h,omitempty"`
	SLOSecond float64            `json:"slo_s"`
	// Raised: the share of periods Escra's rule raised each member
	// (pema-guarded). Fast: a rollback inside the interval, on the
	// sliding p95 (P95, Requests and RPS are that window's).
	Raised map[string]float64 `json:"raised,omitempty"`
	Fast   bool               `json:"fast,omitempty"`
}

// DB makes range id's RHDb (nil: in memory).
type DB func(rangeID int) (pema.RHDb, error)

// Loop is one app's PEMA.
type Loop struct {
	cfg   Config
	app   App
	tg    *allocator.Targets
	proxy *Proxy
	newDB DB
	log   *slog.Logger

	mu    sync.Mutex
	mg    *pema.Manager
	names []string
	keys  []allocator.Key
	recs  []Record
	slo   float64
	begin time.Time // the interval's start
	perUs float64   // the app's CFS period, µs

	stop chan struct{}
	done chan struct{}
}

// Start starts the proxy and the loop.
func Start(cfg Config, a App, tg *allocator.Targets, newDB DB, log *slog.Logger) (*Loop, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tg == nil || a == nil {
		return nil, errors.New("pema: no app")
	}
	p, err := NewProxy(cfg.Listen, cfg.Upstream)
	if err != nil {
		return nil, err
	}
	policy := "pema"
	if cfg.PEMA.Guard != nil {
		policy = "pema-guarded"
		cfg.FastWindow = cmp.Or(cfg.FastWindow, DefaultFastWindow)
		cfg.FastEvery = cmp.Or(cfg.FastEvery, DefaultFastEvery)
		cfg.FastMin = cmp.Or(cfg.FastMin, DefaultFastMin)
		p.KeepRecent(cfg.FastWindow)
	}
	l := &Loop{cfg: cfg, app: a, tg: tg, proxy: p, newDB: newDB, log: log.With("app", cfg.App, "policy", policy),
		slo: cfg.PEMA.SLO, stop: make(chan struct{}), done: make(chan struct{})}
	l.log.Info("pema loop started", "proxy", p.Addr(), "upstream", cfg.Upstream, "interval", cfg.Interval, "slo", cfg.PEMA.SLO)
	go l.run()
	return l, nil
}

// ProxyAddr is where clients send requests.
func (l *Loop) ProxyAddr() string { return l.proxy.Addr() }

// Close stops the loop and the proxy (idempotent).
func (l *Loop) Close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	_ = l.proxy.Close()
}

// SetSLO changes the latency target (PEMA Fig 20); the history stays.
func (l *Loop) SetSLO(slo float64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cfg.PEMA
	c.SLO = slo
	if err := c.Validate(); err != nil {
		return err
	}
	l.slo, l.cfg.PEMA.SLO = slo, slo
	if l.mg != nil {
		return l.mg.SetSLO(slo)
	}
	return nil
}

// Records returns the intervals so far.
func (l *Loop) Records() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

func (l *Loop) run() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	l.proxy.Take() // the first window starts now
	l.mu.Lock()
	l.begin = time.Now()
	l.mu.Unlock()
	var fast <-chan time.Time
	if l.cfg.PEMA.Guard != nil {
		ft := time.NewTicker(l.cfg.FastEvery)
		defer ft.Stop()
		fast = ft.C
	}
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.Tick()
		case <-fast:
			if l.Check() {
				t.Reset(l.cfg.Interval) // a rollback inside the interval starts a new one
			}
		}
	}
}

// Tick runs one interval (the ticker calls it; exported for tests).
func (l *Loop) Tick() {
	st := l.app.Snapshot()
	w := l.proxy.Take()
	use := l.tg.Take()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.begin = time.Now()
	rec := Record{Time: time.Now(), P95: w.P95.Seconds(), RPS: w.RPS, Requests: w.N, Errors: w.Errors, SLOSecond: l.slo}
	defer func() {
		if len(l.recs) < 100000 {
			l.recs = append(l.recs, rec)
		}
	}()
	ms := slices.Clone(st.Members)
	slices.SortFunc(ms, func(a, b app.MemberState) int {
		if a.Info.Name != b.Info.Name {
			if a.Info.Name < b.Info.Name {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Info.Key, b.Info.Key)
	})
	names := make([]string, len(ms))
	keys := make([]allocator.Key, len(ms))
	periodUs := float64(st.Params.PeriodUs())
	l.perUs = periodUs
	x0 := make([]float64, len(ms))
	for i, m := range ms {
		names[i], keys[i] = m.Info.Name, m.Info.Key
		x0[i] = float64(m.QuotaUs) / periodUs
	}
	rec.X = map[string]float64{}
	for i, n := range names {
		rec.X[n] = x0[i]
		rec.TotalCPU += x0[i]
	}
	if len(ms) == 0 {
		rec.Skipped = "no members"
		return
	}
	if l.mg == nil || !slices.Equal(names, l.names) || !slices.Equal(keys, l.keys) {
		// PEMA starts (again) from the members' current, ample quotas.
		c := l.cfg.PEMA
		c.SLO, c.Budget = l.slo, st.Budget.CPUCores
		for i := range x0 {
			x0[i] = max(x0[i], c.MinCPU)
		}
		mg, err := pema.NewManager(c, l.cfg.Ranges, x0, l.dbFunc(), l.cfg.Seed)
		if err != nil {
			rec.Skipped = "start: " + err.Error()
			l.log.Error("pema cannot start", "err", err)
			return
		}
		l.mg, l.names, l.keys = mg, names, keys
		l.tg.Set(nil)
		rec.Skipped = "started"
		l.log.Info("pema (re)started", "members", names)
		return
	}
	l.mg.SetBudget(st.Budget.CPUCores)
	if w.N < max(l.cfg.MinRequests, 1) {
		rec.Skipped = fmt.Sprintf("%d requests < %d", w.N, l.cfg.MinRequests)
		return
	}
	o := pema.Obs{P95: w.P95.Seconds(), RPS: w.RPS, U: make([]float64, len(ms)), H: make([]float64, len(ms))}
	if w.Errors*20 > w.N {
		// More than 5 % failed upstream: that is a violation whatever the
		// successful requests' latency.
		o.P95 = max(o.P95, 2*l.slo)
	}
	for i, k := range keys {
		u := use[k]
		if u.QuotaUs > 0 {
			o.U[i] = float64(u.UsedUs) / float64(u.QuotaUs)
		}
		if u.Periods > 0 {
			o.H[i] = float64(u.Throttled) / float64(u.Periods)
		}
	}
	rec.U, rec.H = map[string]float64{}, map[string]float64{}
	for i, n := range names {
		rec.U[n], rec.H[n] = o.U[i], o.H[i]
	}
	if l.cfg.PEMA.Guard != nil {
		o.Raised = make([]float64, len(keys))
		rec.Raised = map[string]float64{}
		for i, k := range keys {
			if u := use[k]; u.Periods > 0 {
				o.Raised[i] = float64(u.Raised) / float64(u.Periods)
			}
			rec.Raised[names[i]] = o.Raised[i]
		}
	}
	rec.P95 = o.P95
	s, err := l.mg.Step(o)
	if err != nil {
		rec.Skipped = err.Error()
		l.log.Warn("pema step failed", "err", err)
		return
	}
	tg := make(map[allocator.Key]int64, len(keys))
	rec.X, rec.TotalCPU = map[string]float64{}, 0
	for i, k := range keys {
		tg[k] = int64(s.X[i] * periodUs)
		rec.X[names[i]] = s.X[i]
		rec.TotalCPU += s.X[i]
	}
	for _, i := range s.Cut {
		rec.Cut = append(rec.Cut, names[i])
	}
	l.tg.Set(tg)
	rec.Kind, rec.Range, rec.Violate = s.Kind, s.Range, s.Violate
	l.log.Info("pema step", "kind", s.Kind, "p95_ms", o.P95*1000, "rps", w.RPS, "requests", w.N,
		"range", s.Range, "total_cpu", rec.TotalCPU, "violate", s.Violate, "cut", rec.Cut)
}

// Replay runs PEMA on recorded intervals without a clock, Docker or a
// proxy: from the allocation of the record that (re)started it, every
// recorded step's observation in order. With the loop's configuration and
// seed the decisions are the recorded ones (PEMA is deterministic given
// its observations).
func Replay(c pema.Config, rc pema.RangeConfig, seed uint64, recs []Record) ([]pema.Step, error) {
	var mg *pema.Manager
	var names []string
	var out []pema.Step
	for _, r := range recs {
		if r.Skipped == "started" {
			names = names[:0]
			for n := range r.X {
				names = append(names, n)
			}
			slices.Sort(names)
			x0 := make([]float64, len(names))
			for i, n := range names {
				x0[i] = max(r.X[n], c.MinCPU)
			}
			cc := c
			cc.SLO = r.SLOSecond
			var err error
			if mg, err = pema.NewManager(cc, rc, x0, nil, seed); err != nil {
				return nil, err
			}
			continue
		}
		if r.Kind == "" || mg == nil {
			continue
		}
		if err := mg.SetSLO(r.SLOSecond); err != nil {
			return nil, err
		}
		if r.Fast {
			s, err := mg.Violation(r.P95, r.RPS)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			continue
		}
		o := pema.Obs{P95: r.P95, RPS: r.RPS, U: make([]float64, len(names)), H: make([]float64, len(names))}
		for i, n := range names {
			o.U[i], o.H[i] = r.U[n], r.H[n]
		}
		if r.Raised != nil {
			o.Raised = make([]float64, len(names))
			for i, n := range names {
				o.Raised[i] = r.Raised[n]
			}
		}
		s, err := mg.Step(o)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (l *Loop) dbFunc() func(int) (pema.RHDb, error) {
	if l.newDB == nil {
		return nil
	}
	return func(id int) (pema.RHDb, error) { return l.newDB(id) }
}
