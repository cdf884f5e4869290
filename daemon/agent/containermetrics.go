package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/escra-dev/escra/internal/version"
)

// Per-container series in base units (seconds, bytes, cores), read from
// the kernel's own counters through containerd/cgroups/v3 when Prometheus
// scrapes: counters survive lost telemetry datagrams and controller
// restarts, and rate() over them is exact. The names are stable; they are
// listed in docs/operator.md ("Metrics").
var (
	containerLabels = []string{"app", "container", "name"}
	dCPUUsage       = prometheus.NewDesc("escra_container_cpu_usage_seconds_total",
		"CPU time the container's tasks used (cpuacct.usage; v2 usage_usec).", containerLabels, nil)
	dCPUThrottled = prometheus.NewDesc("escra_container_cpu_throttled_seconds_total",
		"Time the container's tasks waited out of CFS quota (cpu.stat throttled_time; v2 throttled_usec).", containerLabels, nil)
	dCPUPeriods = prometheus.NewDesc("escra_container_cpu_periods_total",
		"CFS periods in which the container had runnable tasks (nr_periods).", containerLabels, nil)
	dCPUThrPeriods = prometheus.NewDesc("escra_container_cpu_throttled_periods_total",
		"CFS periods in which the container ran out of quota (nr_throttled).", containerLabels, nil)
	dCPULimit = prometheus.NewDesc("escra_container_cpu_limit_cores",
		"CPU limit escrad last wrote: quota / period, in cores (absent: no limit).", containerLabels, nil)
	dMemWorking = prometheus.NewDesc("escra_container_memory_charged_bytes",
		"Memory charged to the container's group (usage_in_bytes; v2 memory.current).", containerLabels, nil)
	dMemMax = prometheus.NewDesc("escra_container_memory_max_bytes",
		"Memory limit of the container's group (absent: no limit).", containerLabels, nil)
)

type containerCollector struct{ a *Agent }

func (containerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dCPUUsage, dCPUThrottled, dCPUPeriods, dCPUThrPeriods, dCPULimit, dMemWorking, dMemMax} {
		ch <- d
	}
}

func (c containerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.a.list() {
		st, err := m.g.Paths.Stats()
		if err != nil {
			continue // gone between the list and the read
		}
		l := []string{m.c.App, short(m.c.ID), m.c.Name}
		ch <- prometheus.MustNewConstMetric(dCPUUsage, prometheus.CounterValue, st.CPUUsage.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(dCPUThrottled, prometheus.CounterValue, st.CPUThrottled.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(dCPUPeriods, prometheus.CounterValue, float64(st.Periods), l...)
		ch <- prometheus.MustNewConstMetric(dCPUThrPeriods, prometheus.CounterValue, float64(st.ThrottledPeriods), l...)
		if q, p := c.a.cpuLimits(m.h); q > 0 && p > 0 {
			ch <- prometheus.MustNewConstMetric(dCPULimit, prometheus.GaugeValue, float64(q)/float64(p), l...)
		}
		ch <- prometheus.MustNewConstMetric(dMemWorking, prometheus.GaugeValue, float64(st.MemoryUsage), l...)
		if st.MemoryLimit > 0 {
			ch <- prometheus.MustNewConstMetric(dMemMax, prometheus.GaugeValue, float64(st.MemoryLimit), l...)
		}
	}
}

// registerProcessMetrics adds what every Go exporter has: go_* (GC, goroutines,
// memory) and process_* (CPU seconds, RSS, open fds), plus the build info.
func registerProcessMetrics(r *prometheus.Registry, component string) {
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.Collector(component))
}
