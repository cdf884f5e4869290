package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/escra-dev/escra/controller/pema"
)

// summarize computes the comparison's keys. A policy's CPU is the mean Σ
// quota once it has settled: RULE and Escra (which settle within an
// interval or two) over the second half of their fixed-load run, PEMA
// over the last third of its fixed-load intervals, before the SLO change
// (PEMA Fig 15 compares the allocation PEMA finds; the 2026-11-25
// run averaged intervals 10–19 of 20, most of them still on the way down,
// which is also reported, as pema_cpu_cores_second_half). Usage beside
// each: what the app burnt under that allocation.
func summarize(e *env, ps []*Phase) map[string]any {
	get := func(n string) *Phase {
		for _, p := range ps {
			if p.Name == n {
				return p
			}
		}
		return nil
	}
	out := map[string]any{"slo_ms": float64(e.slo) / 1e6, "rps": e.o.rps, "interval_s": e.o.interval.Seconds(),
		"omega_cores": e.o.omega, "cfs_burst": e.o.burst, "services": len(e.svcs), "hashes_per_ms": e.o.hashesPerMs, "ms": e.o.ms, "ms_cpu": e.o.msCPU,
		"note": "one run on a 2-core machine shared with other engineers' jobs; client pinned to CPU " + e.o.clientCPUs + ", app on cpuset " + e.o.appCPUs}
	pm, rl, es, op := get("pema"), get("rule"), get("escra"), get("optm")
	n := fixedSteps(pm) // the intervals before the SLO change
	if pm != nil {
		cpu := mean(pm.CPU[n-(n+2)/3 : n])
		out["pema_cpu_cores"] = cpu
		out["pema_usage_cores"] = mean(pm.Usage[n-(n+2)/3 : n])
		out["pema_cpu_cores_second_half"] = mean(pm.CPU[n/2 : n])
		out["pema_slo_violation_pct"] = violPct(pm.P95ms[:n], pm.SLOms[:n])
		out["pema_iterations_to_converge"] = converge(pm.CPU[:n])
		rb := 0
		for _, r := range pm.Records {
			if r.Kind == pema.KindRollback {
				rb++
			}
		}
		out["pema_rollbacks"] = rb
		if len(pm.CPU) > n {
			out["pema_slo_change_cpu_cores"] = mean(pm.CPU[n+len(pm.CPU[n:])/2:])
			out["pema_slo_change_violation_pct"] = violPct(pm.P95ms[n:], pm.SLOms[n:])
		}
		if op != nil {
			out["optm_cpu_cores"] = sum(op.Final)
			out["pema_cpu_vs_optm_ratio"] = cpu / sum(op.Final)
		}
		if rl != nil {
			out["pema_cpu_vs_rule_pct"] = 100 * (cpu/mean(rl.CPU[len(rl.CPU)/2:]) - 1)
		}
	}
	if rl != nil {
		out["rule_cpu_cores"] = mean(rl.CPU[len(rl.CPU)/2:])
		out["rule_usage_cores"] = mean(rl.Usage[len(rl.Usage)/2:])
		out["rule_slo_violation_pct"] = violPct(rl.P95ms, rl.SLOms)
		out["rule_target"] = rl.Target
		out["rule_tune_trials"] = len(rl.Tried)
		out["rule_tuned_ok"] = rl.TunedOK
	}
	if rv := get("rule-vpa"); rv != nil {
		out["rule_vpa_cpu_cores"] = mean(rv.CPU[len(rv.CPU)/2:])
		out["rule_vpa_usage_cores"] = mean(rv.Usage[len(rv.Usage)/2:])
		out["rule_vpa_slo_violation_pct"] = violPct(rv.P95ms, rv.SLOms)
	}
	if es != nil {
		out["escra_cpu_cores"] = mean(es.CPU[len(es.CPU)/2:])
		out["escra_usage_cores"] = mean(es.Usage[len(es.Usage)/2:])
		out["escra_slo_violation_pct"] = violPct(es.P95ms, es.SLOms)
		if rl != nil {
			out["escra_cpu_vs_rule_pct"] = 100 * (mean(es.CPU[len(es.CPU)/2:])/mean(rl.CPU[len(rl.CPU)/2:]) - 1)
		}
	}
	for _, n := range []string{"pema-daily", "rule-daily", "rule-vpa-daily", "escra-daily"} {
		if p := get(n); p != nil {
			k := strings.ReplaceAll(n, "-", "_")
			out[k+"_cpu_cores"] = mean(p.CPU)
			out[k+"_usage_cores"] = mean(p.Usage)
			out[k+"_slo_violation_pct"] = violPct(p.P95ms, p.SLOms)
		}
	}
	// Services that stopped (OOM kill or crash) during a phase, per phase
	// and in all: a phase with any measured a broken app.
	died := 0
	for _, p := range ps {
		out[strings.ReplaceAll(p.Name, "-", "_")+"_services_died"] = len(p.Died)
		died += len(p.Died)
	}
	out["services_died_total"] = died
	pooled(e, ps, out)
	return out
}

// fixedSteps is how many of p's intervals ran at the first SLO (PEMA's
// fixed-load run before Fig 20's cut), read from the phase itself so that
// -summarize-only gets it right for a run of any length.
func fixedSteps(p *Phase) int {
	if p == nil {
		return 0
	}
	for i, v := range p.SLOms {
		if v != p.SLOms[0] {
			return min(i, len(p.CPU))
		}
	}
	return min(len(p.SLOms), len(p.CPU))
}

// converge is the first interval after which Σx stays within 5 % of the
// run's final value (PEMA Fig 11's "settles").
func converge(cpu []float64) int {
	if len(cpu) == 0 {
		return 0
	}
	f := cpu[len(cpu)-1]
	for i := len(cpu) - 1; i >= 0; i-- {
		if math.Abs(cpu[i]-f) > 0.05*f {
			return i + 1
		}
	}
	return 0
}

func findPhase(ps []*Phase, n string) *Phase {
	for _, p := range ps {
		if p.Name == n {
			return p
		}
	}
	return nil
}

func violPct(p95, slo []float64) float64 {
	if len(p95) == 0 {
		return 0
	}
	n := 0
	for i := range p95 {
		if p95[i] > slo[i] {
			n++
		}
	}
	return 100 * float64(n) / float64(len(p95))
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return sum(v) / float64(len(v))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func first(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

func last(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[len(v)-1]
}

func fmtX(x []float64) string {
	var s []string
	for _, v := range x {
		s = append(s, fmt.Sprintf("%.3f", v))
	}
	return strings.Join(s, " ")
}
