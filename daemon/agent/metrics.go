package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/escra-dev/escra/internal/auth"
)

type metrics struct {
	applyLatency prometheus.Histogram
	applyErrors  prometheus.Counter
	acksDeferred prometheus.Counter
	oomRescue    prometheus.Histogram
	oomEvents    prometheus.Counter
	oomOutcome   *prometheus.CounterVec
	oomLate      prometheus.Counter
	oomVia       *prometheus.CounterVec
	records      prometheus.Counter
	thrEvents    prometheus.Counter
	thrRaise     prometheus.Histogram
	leaseRaise   prometheus.Histogram
	leaseUses    prometheus.Counter
	reclaimed    prometheus.Counter
	restored     prometheus.Counter
}

func newMetrics(r *prometheus.Registry, a *Agent) metrics {
	us := prometheus.ExponentialBuckets(1e-6, 2, 20) // 1 µs … 0.5 s
	m := metrics{
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escrad_apply_latency_seconds", Help: "SetLimits received to cgroup write done.", Buckets: us}),
		applyErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_apply_errors_total", Help: "Limit updates not applied (stale, unknown, write error)."}),
		acksDeferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_acks_deferred_total", Help: "Cuts written but acknowledged only after a docker update carrying a larger limit settled."}),
		oomRescue:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escrad_oom_rescue_seconds", Help: "OOM wake-up to the write that raises the limit (and wakes the tasks).", Buckets: us}),
		oomEvents:    prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_oom_events_total", Help: "OOM events trapped."}),
		oomOutcome:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escrad_oom_outcomes_total", Help: "OOM events by outcome."}, []string{"outcome"}),
		oomLate:      prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_oom_late_grants_total", Help: "OOM grants that came after the episode was resolved (verdict after --oom-deadline, or escra.ko's oom_timeout_ms over before the reply)."}),
		records:      prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_telemetry_records_total", Help: "Per-period CPU records produced."}),
		thrEvents:    prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_throttle_events_total", Help: "Throttle events sent (nr_throttled rose between period samples)."}),
		thrRaise:     prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escrad_throttle_raise_seconds", Help: "Throttle event seen to the write that raised the quota above the one throttled.", Buckets: us}),
		leaseRaise:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escrad_lease_raise_seconds", Help: "Throttle event seen to the quota raised from host-local lease credit.", Buckets: us}),
		leaseUses:    prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_lease_uses_total", Help: "Throttle events answered from host-local lease credit (not forwarded)."}),
		reclaimed:    prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_reclaimed_bytes_total", Help: "Memory reclaimed (Escra §IV-C)."}),
		restored:     prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_limits_restored_total", Help: "Containers whose own limits were put back for want of a controller (--restore-after)."}),
	}
	m.oomVia = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escrad_oom_rescues_total",
		Help: "OOM rescues by who answered: credit (host-local memory credit, no round trip), controller, outage (raised to the user's own limit)."}, []string{"via"})
	for _, v := range []string{"credit", "controller", "outage"} {
		m.oomVia.WithLabelValues(v) // exported from the start at 0
	}
	registerProcessMetrics(r, "escrad")
	if a.cfg.Identity != nil {
		r.MustRegister(a.cfg.Identity.Collector())
	} else if a.cfg.TLS != nil {
		r.MustRegister(auth.ExpiryCollector(a.cfg.TLS))
	}
	r.MustRegister(containerCollector{a})
	r.MustRegister(m.applyLatency, m.applyErrors, m.acksDeferred, m.oomRescue, m.oomEvents, m.oomOutcome, m.oomLate, m.oomVia, m.records, m.thrEvents, m.thrRaise, m.leaseRaise, m.leaseUses, m.reclaimed, m.restored,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "escrad_controller_term", Help: "Highest controller leadership term seen (0: no leader election)."}, func() float64 {
			return float64(a.link.Term())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escrad_stale_term_refused_total", Help: "Controller messages refused for a leadership term below the highest seen (a deposed leader's)."}, func() float64 {
			return float64(a.link.StaleRefused.Load())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escrad_controller_actions_total", Help: "Controller actions carried out: limits, reclaims, deploys, OOM verdicts, leases, memory credits."}, func() float64 {
			return float64(a.link.Actions.Load())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escrad_stale_term_applied_total", Help: "Controller actions carried out whose term was below the highest seen once done (should stay 0)."}, func() float64 {
			return float64(a.link.StaleApplied.Load())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "escrad_containers_managed", Help: "Managed containers."}, func() float64 {
			a.mu.Lock()
			defer a.mu.Unlock()
			return float64(len(a.byH))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "escrad_controller_connected", Help: "1 when the controller session is up."}, func() float64 {
			if a.link.Connected() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escrad_telemetry_datagrams_total", Help: "Telemetry datagrams sent."}, func() float64 {
			return float64(a.link.Datagrams.Load())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escrad_controller_connects_total", Help: "Controller sessions established."}, func() float64 {
			return float64(a.link.Connects.Load())
		}),
	)
	return m
}
