package version

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector is escra_build_info{component, version, goversion} = 1, the
// usual way to join a build onto other series in PromQL; escrad and
// escra-controller both export it (docs/operator.md, "Metrics").
func Collector(component string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "escra_build_info",
		Help:        "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"component": component, "version": Version, "goversion": runtime.Version()},
	}, func() float64 { return 1 })
}
