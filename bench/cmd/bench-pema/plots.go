package main

import (
	"os"
	"path/filepath"

	bp "github.com/escra-dev/escra/bench/pema"
)

func plots(dir string, e *env, ps []*Phase) {
	for _, load := range []string{"fixed", "daily"} {
		var cpu, lat []bp.Series
		var slo float64
		for _, p := range ps {
			if p.Load != load || len(p.CPU) < 2 || p.Rep > 1 || p.Set != "" {
				continue
			}
			x := make([]float64, len(p.CPU))
			for i := range x {
				x[i] = float64(i + 1)
			}
			cpu = append(cpu, bp.Series{Name: p.Policy, X: x, Y: p.CPU})
			lat = append(lat, bp.Series{Name: p.Policy, X: x, Y: p.P95ms})
			slo = p.SLOms[0]
			if load == "fixed" && p.Policy == "pema" {
				lat = append(lat, bp.Series{Name: "SLO (pema)", X: x, Y: p.SLOms})
			}
			if load == "daily" && p.Policy == "rule" {
				rps := make([]float64, len(p.RPS))
				for i, v := range p.RPS {
					rps[i] = v / e.o.rps * e.o.omega / 2
				}
				cpu = append(cpu, bp.Series{Name: "load (scaled)", X: x, Y: rps})
			}
		}
		if len(cpu) == 0 {
			continue
		}
		if op := findPhase(ps, "optm"); op != nil && load == "fixed" {
			n := len(cpu[0].X)
			xs, ys := make([]float64, n), make([]float64, n)
			for i := range xs {
				xs[i], ys[i] = float64(i+1), sum(op.Final)
			}
			cpu = append(cpu, bp.Series{Name: "OPTM", X: xs, Y: ys})
		}
		os.WriteFile(filepath.Join(dir, "cpu-"+load+".svg"), []byte(bp.SVG("CPU allocation, "+load+" load", "interval", "cores (Σ quota)", cpu, nil)), 0o644)
		os.WriteFile(filepath.Join(dir, "p95-"+load+".svg"), []byte(bp.SVG("client p95, "+load+" load", "interval", "ms", lat, map[string]float64{"SLO": slo})), 0o644)
	}
}
