package server

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/spec"
)

// metrics are the controller's Prometheus series. Per-app and
// per-container gauges are read from Snapshot at scrape time, so the
// decision path only touches counters and histograms.
type metrics struct {
	s               *Server
	reg             *prometheus.Registry
	decisions       *prometheus.CounterVec
	throttleEvents  *prometheus.CounterVec
	leases          *prometheus.CounterVec
	memCredit       *prometheus.CounterVec
	badInput        *prometheus.CounterVec
	decisionLatency prometheus.Histogram
	verdictLatency  prometheus.Histogram
	storeBad        prometheus.Counter

	mu       sync.Mutex
	dropN    map[string]*atomic.Uint64
	decCache sync.Map // reason → prometheus.Counter
}

var latencyBuckets = []float64{25e-6, 50e-6, 100e-6, 200e-6, 400e-6, 800e-6, 1.6e-3, 3.2e-3, 6.4e-3, 12.8e-3, 25.6e-3, 0.1, 1}

func newMetrics(s *Server) *metrics {
	m := &metrics{s: s, reg: prometheus.NewRegistry(), dropN: map[string]*atomic.Uint64{}}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escra_decisions_total",
		Help: "Allocator decisions carried out, by reason (throttled, unused, bootstrap, oom-granted, ...)."}, []string{"reason"})
	m.throttleEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escra_throttle_events_total",
		Help: "Throttle events (a container ran out of quota mid-period), by result: raised, took (members above their share cut; the raise follows their acknowledgements), nochange, stale."}, []string{"result"})
	m.leases = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escra_lease_events_total",
		Help: "Host-local CPU lease messages, by event: grant, revoke (sent), use, return (received)."}, []string{"event"})
	m.memCredit = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escra_mem_credit_events_total",
		Help: "Host-local memory credit messages, by event: grant, revoke (sent), use, return (received)."}, []string{"event"})
	m.badInput = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escra_bad_input_total",
		Help: "Dropped input (telemetry and session messages), by reason."}, []string{"reason"})
	m.decisionLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escra_decision_latency_seconds",
		Help: "Telemetry datagram received to set-limits written.", Buckets: latencyBuckets})
	m.verdictLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escra_oom_verdict_latency_seconds",
		Help: "OOM request read to verdict written (includes the set-limits round trip).", Buckets: latencyBuckets})
	m.storeBad = prometheus.NewCounter(prometheus.CounterOpts{Name: "escra_store_bad_records_total",
		Help: "Stored records skipped at load because they do not decode or define no valid app (logged with their key)."})
	// The results are known: export them from the start at 0.
	for _, r := range []string{app.ThrottleRaised, app.ThrottleTook, app.ThrottleNoChange, app.ThrottleStale} {
		m.throttleEvents.WithLabelValues(r)
	}
	m.reg.MustRegister(m.decisions, m.throttleEvents, m.leases, m.memCredit, m.badInput, m.decisionLatency, m.verdictLatency, m.storeBad, m,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escra_telemetry_datagrams_total", Help: "Telemetry datagrams received."},
			func() float64 { return float64(s.udp.C.Datagrams.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escra_telemetry_stats_total", Help: "CPU statistics received."},
			func() float64 { return float64(s.udp.C.Stats.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escra_telemetry_bytes_total", Help: "Telemetry payload bytes received."},
			func() float64 { return float64(s.udp.C.Bytes.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escra_telemetry_pinned_datagrams_total",
			Help: "Telemetry datagrams received on per-session sockets (not the shared one)."},
			func() float64 { return float64(s.udp.C.Pinned.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "escra_telemetry_session_sockets",
			Help: "Open per-session telemetry sockets."},
			func() float64 { return float64(s.udp.Pins()) }))
	return m
}

// Decision implements app.Counters. Counters are cached per reason: this
// runs for every decision.
func (m *metrics) Decision(kind string) {
	if c, ok := m.decCache.Load(kind); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.decisions.WithLabelValues(kind)
	m.decCache.Store(kind, c)
	c.Inc()
}

// ThrottleEvent implements app.Counters.
func (m *metrics) ThrottleEvent(result string) { m.throttleEvents.WithLabelValues(result).Inc() }

// Lease implements app.Counters.
func (m *metrics) Lease(event string) { m.leases.WithLabelValues(event).Inc() }

// MemCredit counts a host-local memory credit event (app.creditCounter).
func (m *metrics) MemCredit(event string) { m.memCredit.WithLabelValues(event).Inc() }

// BadStat implements app.Counters.
func (m *metrics) BadStat(reason string) { m.bad(reason, 1) }

func (m *metrics) bad(reason string, n int) {
	m.badInput.WithLabelValues(reason).Add(float64(n))
	m.mu.Lock()
	c := m.dropN[reason]
	if c == nil {
		c = &atomic.Uint64{}
		m.dropN[reason] = c
	}
	m.mu.Unlock()
	c.Add(uint64(n))
}

func (m *metrics) drops() map[string]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]uint64, len(m.dropN))
	for k, v := range m.dropN {
		out[k] = v.Load()
	}
	return out
}

var (
	dAppCPU      = prometheus.NewDesc("escra_app_cpu_limit_cores", "Global CPU limit Ω.", []string{"app"}, nil)
	dAppCPUAlloc = prometheus.NewDesc("escra_app_cpu_allocated_cores", "Σ member quotas.", []string{"app"}, nil)
	dAppCPULease = prometheus.NewDesc("escra_app_cpu_leased_cores", "Σ host-local CPU leases outstanding (counted as allocated).", []string{"app"}, nil)
	dAppMem      = prometheus.NewDesc("escra_app_memory_limit_bytes", "Global memory limit.", []string{"app"}, nil)
	dAppMemCred  = prometheus.NewDesc("escra_app_memory_credit_bytes", "Σ host-local memory credit outstanding (counted as assigned).", []string{"app"}, nil)
	dAppMemAlloc = prometheus.NewDesc("escra_app_memory_allocated_bytes", "Σ member memory limits.", []string{"app"}, nil)
	dAppMembers  = prometheus.NewDesc("escra_app_members", "Members of the app.", []string{"app"}, nil)
	dAppRecOnly  = prometheus.NewDesc("escra_app_recommend_mode", "1 when the app only recommends (mode: recommend), 0 when it enforces.", []string{"app"}, nil)
	cLabels      = []string{"app", "host", "container"}
	// The names escrad also exports for the same fact (its kernel-side
	// view); the job label tells them apart.
	dCQuota  = prometheus.NewDesc("escra_container_cpu_limit_cores", "CPU quota the controller set, over the period, in cores.", cLabels, nil)
	dCUsage  = prometheus.NewDesc("escra_container_cpu_period_usage_cores", "CPU used in the last reported period over the period, in cores.", cLabels, nil)
	dCMem    = prometheus.NewDesc("escra_container_memory_max_bytes", "Memory limit the controller set.", cLabels, nil)
	dCMemUse = prometheus.NewDesc("escra_container_memory_charged_bytes", "Memory charged, as escrad last reported.", cLabels, nil)
	dCThr    = prometheus.NewDesc("escra_container_cpu_throttled_periods_total", "Throttled periods.", cLabels, nil)
	dCThrEv  = prometheus.NewDesc("escra_container_throttle_events_total", "Throttle events (out of quota mid-period).", cLabels, nil)
	dCOOM    = prometheus.NewDesc("escra_container_oom_requests_total", "OOM requests.", cLabels, nil)
	dCGrant  = prometheus.NewDesc("escra_container_oom_grants_total", "OOM requests granted.", cLabels, nil)
	dCDeny   = prometheus.NewDesc("escra_container_oom_denials_total", "OOM requests denied.", cLabels, nil)
	dCRecCPU = prometheus.NewDesc("escra_container_recommended_cpu_cores", "CPU limit the allocator would set (apps in recommend mode).", cLabels, nil)
	dCRecMem = prometheus.NewDesc("escra_container_recommended_memory_bytes", "Memory limit the allocator would set (apps in recommend mode).", cLabels, nil)
)

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dAppCPU, dAppCPUAlloc, dAppCPULease, dAppMem, dAppMemAlloc, dAppMemCred, dAppMembers, dAppRecOnly,
		dCQuota, dCUsage, dCMem, dCMemUse, dCThr, dCThrEv, dCOOM, dCGrant, dCDeny, dCRecCPU, dCRecMem} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.s.Snapshot()
	g := prometheus.GaugeValue
	for _, a := range st.Apps {
		ch <- prometheus.MustNewConstMetric(dAppCPU, g, a.CPUCores, a.Name)
		ch <- prometheus.MustNewConstMetric(dAppCPUAlloc, g, a.CPUAllocatedCores, a.Name)
		ch <- prometheus.MustNewConstMetric(dAppCPULease, g, a.CPULeasedCores, a.Name)
		ch <- prometheus.MustNewConstMetric(dAppMem, g, float64(a.MemoryBytes), a.Name)
		ch <- prometheus.MustNewConstMetric(dAppMemAlloc, g, float64(a.MemoryAllocatedBytes), a.Name)
		ch <- prometheus.MustNewConstMetric(dAppMemCred, g, float64(a.MemoryCreditBytes), a.Name)
		ch <- prometheus.MustNewConstMetric(dAppMembers, g, float64(a.Members), a.Name)
		rec := 0.0
		if a.Mode == spec.ModeRecommend {
			rec = 1
		}
		ch <- prometheus.MustNewConstMetric(dAppRecOnly, g, rec, a.Name)
	}
	c := prometheus.CounterValue
	seen := map[[3]string]bool{}
	for _, x := range st.Containers {
		id := x.ContainerID
		if id == "" {
			id = fmt.Sprintf("handle-%d", x.Handle)
		}
		l := [3]string{x.App, x.HostID, id}
		if seen[l] { // two sessions claiming one id: export the first
			continue
		}
		seen[l] = true
		if x.CPUPeriodUs > 0 {
			p := float64(x.CPUPeriodUs)
			ch <- prometheus.MustNewConstMetric(dCQuota, g, float64(x.CPUQuotaUs)/p, l[:]...)
			ch <- prometheus.MustNewConstMetric(dCUsage, g, float64(x.CPUUsageUs)/p, l[:]...)
		}
		ch <- prometheus.MustNewConstMetric(dCMem, g, float64(x.MemoryLimitBytes), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCMemUse, g, float64(x.MemoryUsageBytes), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCThr, c, float64(x.ThrottledPeriods), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCThrEv, c, float64(x.ThrottleEvents), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCOOM, c, float64(x.OOMRequests), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCGrant, c, float64(x.OOMGrants), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCDeny, c, float64(x.OOMDenials), l[:]...)
		if x.RecommendedCPUCores > 0 || x.RecommendedMemoryBytes > 0 {
			ch <- prometheus.MustNewConstMetric(dCRecCPU, g, x.RecommendedCPUCores, l[:]...)
			ch <- prometheus.MustNewConstMetric(dCRecMem, g, float64(x.RecommendedMemoryBytes), l[:]...)
		}
	}
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{})
}

// startMetrics serves /metrics alone on cfg.MetricsAddr, plain, for a
// Prometheus scraping from loopback.
func (s *Server) startMetrics() error {
	if s.cfg.MetricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", s.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metricsHandler())
	s.metricsLn = ln
	s.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.metricsSrv.Serve(ln) }()
	return nil
}

// MetricsAddr is the plain /metrics address ("" when disabled).
func (s *Server) MetricsAddr() string {
	if s.metricsLn == nil {
		return ""
	}
	return s.metricsLn.Addr().String()
}
