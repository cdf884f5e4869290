package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/internal/version"
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
	badInput        *prometheus.CounterVec
	decisionLatency prometheus.Histogram
	verdictLatency  prometheus.Histogram

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
		Help: "Host-local CPU lease messages (issue 11), by event: grant, revoke (sent), use, return (received)."}, []string{"event"})
	m.badInput = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escra_bad_input_total",
		Help: "Dropped input (telemetry and session messages), by reason."}, []string{"reason"})
	m.decisionLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escra_decision_latency_seconds",
		Help: "Telemetry datagram received to set-limits written.", Buckets: latencyBuckets})
	m.verdictLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escra_oom_verdict_latency_seconds",
		Help: "OOM request read to verdict written (includes the set-limits round trip).", Buckets: latencyBuckets})
	// The results are known: export them from the start at 0.
	for _, r := range []string{app.ThrottleRaised, app.ThrottleTook, app.ThrottleNoChange, app.ThrottleStale} {
		m.throttleEvents.WithLabelValues(r)
	}
	m.reg.MustRegister(m.decisions, m.throttleEvents, m.leases, m.badInput, m.decisionLatency, m.verdictLatency, m,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escra_telemetry_datagrams_total", Help: "Telemetry datagrams received."},
			func() float64 { return float64(s.udp.C.Datagrams.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escra_telemetry_stats_total", Help: "CPU statistics received."},
			func() float64 { return float64(s.udp.C.Stats.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "escra_telemetry_bytes_total", Help: "Telemetry payload bytes received."},
			func() float64 { return float64(s.udp.C.Bytes.Load()) }))
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
	dAppMemAlloc = prometheus.NewDesc("escra_app_memory_allocated_bytes", "Σ member memory limits.", []string{"app"}, nil)
	dAppMembers  = prometheus.NewDesc("escra_app_members", "Members of the app.", []string{"app"}, nil)
	cLabels      = []string{"app", "host", "container"}
	dCQuota      = prometheus.NewDesc("escra_container_cpu_quota_us", "CPU quota per period.", cLabels, nil)
	dCUsage      = prometheus.NewDesc("escra_container_cpu_usage_us", "CPU used in the last reported period.", cLabels, nil)
	dCMem        = prometheus.NewDesc("escra_container_memory_limit_bytes", "Memory limit.", cLabels, nil)
	dCMemUse     = prometheus.NewDesc("escra_container_memory_usage_bytes", "Memory usage.", cLabels, nil)
	dCThr        = prometheus.NewDesc("escra_container_throttled_periods_total", "Throttled periods.", cLabels, nil)
	dCThrEv      = prometheus.NewDesc("escra_container_throttle_events_total", "Throttle events (out of quota mid-period).", cLabels, nil)
	dCOOM        = prometheus.NewDesc("escra_container_oom_requests_total", "OOM requests.", cLabels, nil)
	dCGrant      = prometheus.NewDesc("escra_container_oom_grants_total", "OOM requests granted.", cLabels, nil)
	dCDeny       = prometheus.NewDesc("escra_container_oom_denials_total", "OOM requests denied.", cLabels, nil)
)

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dAppCPU, dAppCPUAlloc, dAppCPULease, dAppMem, dAppMemAlloc, dAppMembers,
		dCQuota, dCUsage, dCMem, dCMemUse, dCThr, dCThrEv, dCOOM, dCGrant, dCDeny} {
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
		ch <- prometheus.MustNewConstMetric(dAppMembers, g, float64(a.Members), a.Name)
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
		ch <- prometheus.MustNewConstMetric(dCQuota, g, float64(x.CPUQuotaUs), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCUsage, g, float64(x.CPUUsageUs), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCMem, g, float64(x.MemoryLimitBytes), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCMemUse, g, float64(x.MemoryUsageBytes), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCThr, c, float64(x.ThrottledPeriods), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCThrEv, c, float64(x.ThrottleEvents), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCOOM, c, float64(x.OOMRequests), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCGrant, c, float64(x.OOMGrants), l[:]...)
		ch <- prometheus.MustNewConstMetric(dCDeny, c, float64(x.OOMDenials), l[:]...)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/apps", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, s.Snapshot().Apps)
	})
	mux.HandleFunc("GET /v1/containers", func(w http.ResponseWriter, r *http.Request) {
		cs := s.Snapshot().Containers
		if a := r.URL.Query().Get("app"); a != "" {
			out := cs[:0]
			for _, c := range cs {
				if c.App == a {
					out = append(out, c)
				}
			}
			cs = out
		}
		writeJSON(w, 200, cs)
	})
	mux.HandleFunc("GET /v1/apps/{name}/pema", func(w http.ResponseWriter, r *http.Request) {
		l := s.PEMALoop(r.PathValue("name"))
		if l == nil {
			writeJSON(w, 404, map[string]string{"error": "app has no pema policy"})
			return
		}
		writeJSON(w, 200, l.Records())
	})
	mux.HandleFunc("GET /v1/hosts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, s.Snapshot().Hosts)
	})
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, s.Snapshot())
	})
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, adminapi.Version{Version: version.Version, Go: runtime.Version()})
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, s.Stats())
	})
	mux.HandleFunc("POST /v1/stats/reset", func(w http.ResponseWriter, r *http.Request) {
		s.decLat.Reset()
		s.oomLat.Reset()
		writeJSON(w, 200, s.Stats())
	})
	mux.HandleFunc("PUT /v1/apps/{name}", func(w http.ResponseWriter, r *http.Request) {
		var spec AppSpec
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			writeJSON(w, 400, map[string]string{"error": "bad app spec: " + err.Error()})
			return
		}
		if spec.Name == "" {
			spec.Name = r.PathValue("name")
		}
		if spec.Name != r.PathValue("name") {
			writeJSON(w, 400, map[string]string{"error": "name in body differs from the path"})
			return
		}
		if err := s.DefineApp(spec); err != nil {
			writeJSON(w, storeStatus(err, 400), map[string]string{"error": err.Error()})
			return
		}
		for _, a := range s.Snapshot().Apps {
			if a.Name == spec.Name {
				writeJSON(w, 200, a)
				return
			}
		}
		writeJSON(w, 200, spec)
	})
	// The Application Deployer (seed 000 §IV-A): place and create the
	// app's containers; all or nothing.
	mux.HandleFunc("POST /v1/apps/{name}/deploy", func(w http.ResponseWriter, r *http.Request) {
		var req DeployRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, 400, map[string]string{"error": "bad deploy request: " + err.Error()})
			return
		}
		placed, roll, err := s.DeployOrRollout(r.Context(), r.PathValue("name"), req)
		switch {
		case errors.Is(err, ErrUnknownApp):
			writeJSON(w, 404, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, storeStatus(err, 409), map[string]string{"error": err.Error()})
		default:
			writeJSON(w, 200, adminapi.DeployResponse{Containers: placed, Rollout: roll})
		}
	})
	s.scaleRoutes(mux) // issue 15: an autoscaler adds and removes replicas
	mux.HandleFunc("DELETE /v1/apps/{name}", func(w http.ResponseWriter, r *http.Request) {
		n, err := s.RemoveApp(r.Context(), r.PathValue("name"))
		switch {
		case errors.Is(err, ErrUnknownApp):
			writeJSON(w, 404, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, storeStatus(err, 502), map[string]string{"error": err.Error()})
		default:
			writeJSON(w, 200, map[string]any{"name": r.PathValue("name"), "containers_removed": n})
		}
	})
	// Server-sent events: limit changes, OOM verdicts (with reasons),
	// reclaims, joins and leaves.
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		fl, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "streaming unsupported", 500)
			return
		}
		// ?since=RFC3339 time or a duration back from now: replay the
		// kept events first; ?follow=false ends after them.
		q := r.URL.Query()
		var since time.Time
		if v := q.Get("since"); v != "" {
			if d, err := time.ParseDuration(v); err == nil && d >= 0 {
				since = time.Now().Add(-d)
			} else if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				since = t
			} else {
				writeJSON(w, 400, map[string]string{"error": fmt.Sprintf("since %q: want a duration (5m) or an RFC 3339 time", v)})
				return
			}
		}
		follow := q.Get("follow") != "false" && q.Get("follow") != "0"
		past, ch, cancel := s.hub.SubscribeSince(q.Get("app"), since)
		defer cancel()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(200)
		for _, e := range past {
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Kind, b)
		}
		fl.Flush()
		if !follow {
			return
		}
		ping := time.NewTicker(15 * time.Second)
		defer ping.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-s.ctx.Done():
				return
			case <-ping.C:
				io.WriteString(w, ": ping\n\n")
			case e := <-ch:
				b, _ := json.Marshal(e)
				fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Kind, b)
			}
			fl.Flush()
		}
	})
	// Profiles for operators chasing controller CPU: only when asked
	// (--pprof), and only for admins (authorize).
	if s.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	}
	mux.Handle("GET /metrics", s.metricsHandler())
	return s.authorize(s.followerRedirect(mux))
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{})
}
