package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminHandler serves /v1/functions (JSON Statuses) and /metrics.
func (g *Gateway) AdminHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{g})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/functions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"functions": g.Statuses()})
	})
	return mux
}

var (
	descs = map[string]*prometheus.Desc{}
	names = []struct{ n, help string }{
		{"escra_mu_replicas", "replicas ready"},
		{"escra_mu_replicas_pending", "replicas being created"},
		{"escra_mu_replicas_desired", "N_des after the budget and DRF"},
		{"escra_mu_replica_ceiling", "most replicas the app budget allows"},
		{"escra_mu_queue_requests", "requests queued at the queue proxies (piggybacked)"},
		{"escra_mu_inflight_requests", "requests inside the gateway"},
		{"escra_mu_capacity_requests_per_second", "estimated capacity of one replica (Cap_e)"},
		{"escra_mu_rate_requests_per_second", "incoming rate of the last epoch (IR_cur)"},
		{"escra_mu_predicted_requests_per_second", "predicted incoming rate (IR_pred)"},
		{"escra_mu_exec_seconds", "EWMA execution time (ET_avg)"},
		{"escra_mu_served_requests_total", "requests answered below 500"},
		{"escra_mu_rejected_requests_total", "requests answered 503 by admission"},
	}
)

func init() {
	for _, x := range names {
		descs[x.n] = prometheus.NewDesc(x.n, x.help, []string{"function"}, nil)
	}
}

type collector struct{ g *Gateway }

var (
	unfairDesc = prometheus.NewDesc("escra_mu_unfairness_cpu_cores", "Eq 7 unfairness of the last epoch: mean |ready − max-min share| over the functions, cores", nil, nil)
	ineffDesc  = prometheus.NewDesc("escra_mu_inefficiency_cpu_cores", "Eq 7 inefficiency of the last epoch: unmet CPU demand per function, cores", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
	ch <- unfairDesc
	ch <- ineffDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	u, i, _, _ := c.g.Fairness()
	ch <- prometheus.MustNewConstMetric(unfairDesc, prometheus.GaugeValue, u)
	ch <- prometheus.MustNewConstMetric(ineffDesc, prometheus.GaugeValue, i)
	for _, s := range c.g.Statuses() {
		g := func(n string, v float64) {
			ch <- prometheus.MustNewConstMetric(descs[n], prometheus.GaugeValue, v, s.Name)
		}
		g("escra_mu_replicas", float64(s.Ready))
		g("escra_mu_replicas_pending", float64(s.Pending))
		g("escra_mu_replicas_desired", float64(s.Desired))
		g("escra_mu_replica_ceiling", float64(s.Ceiling))
		g("escra_mu_queue_requests", float64(s.Queued))
		g("escra_mu_inflight_requests", float64(s.Inflight))
		g("escra_mu_capacity_requests_per_second", s.CapacityRPS)
		g("escra_mu_rate_requests_per_second", s.RateRPS)
		g("escra_mu_predicted_requests_per_second", s.PredictedRPS)
		g("escra_mu_exec_seconds", s.ExecMs/1000)
		ch <- prometheus.MustNewConstMetric(descs["escra_mu_served_requests_total"], prometheus.CounterValue, float64(s.Served), s.Name)
		ch <- prometheus.MustNewConstMetric(descs["escra_mu_rejected_requests_total"], prometheus.CounterValue, float64(s.Rejected), s.Name)
	}
}
