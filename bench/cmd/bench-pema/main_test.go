package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/internal/pemaapp"
)

// PEMA's CPU is the mean of the last third of its intervals at the first
// SLO (not the intervals after Fig 20's cut, not its descent); RULE's the
// second half of its run. Hand-computed: PEMA's 9 fixed intervals
// 1.5 … 0.7, 0.6, 0.5, 0.4 → last third (0.6, 0.5, 0.4) = 0.5; RULE's
// 5 intervals → indices 2–4 (0.5, 0.5, 0.5) = 0.5; so PEMA vs RULE 0 %,
// and against OPTM 0.4: 1.25; 1 of 9 fixed intervals violated.
func TestSummarizeWindows(t *testing.T) {
	e := &env{o: opts{rps: 60, interval: 10 * time.Second, pemaSteps: 99}, svcs: pemaapp.SixServices(), slo: 100 * time.Millisecond}
	pm := &Phase{Name: "pema", Policy: "pema",
		CPU:   []float64{1.5, 1.2, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.3},
		Usage: []float64{0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3},
		P95ms: []float64{10, 10, 10, 10, 10, 10, 10, 10, 200, 90, 90},
		SLOms: []float64{100, 100, 100, 100, 100, 100, 100, 100, 100, 60, 60}}
	rl := &Phase{Name: "rule", Policy: "rule", CPU: []float64{1.5, 0.9, 0.5, 0.5, 0.5}, Usage: []float64{0.3, 0.3, 0.3, 0.3, 0.3},
		P95ms: []float64{1, 1, 1, 1, 1}, SLOms: []float64{100, 100, 100, 100, 100}, Died: []string{"a1 (OOM-killed)"}}
	op := &Phase{Name: "optm", Policy: "optm", Final: []float64{0.1, 0.1, 0.1, 0.1}}
	s := summarize(e, []*Phase{op, pm, rl})
	near := func(k string, want float64) {
		t.Helper()
		got, _ := s[k].(float64)
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, s[k], want)
		}
	}
	near("pema_cpu_cores", 0.5)
	near("pema_usage_cores", 0.3)
	near("rule_cpu_cores", 0.5) // indices 2–4 of 5
	near("pema_cpu_vs_rule_pct", 0)
	near("pema_cpu_vs_optm_ratio", 1.25)
	near("pema_slo_violation_pct", 100.0/9)
	near("pema_slo_change_violation_pct", 100)
	// A service that stopped is counted for its phase and in all.
	if s["rule_services_died"] != 1 || s["pema_services_died"] != 0 || s["services_died_total"] != 1 {
		t.Errorf("services died: rule %v, pema %v, total %v; want 1, 0, 1", s["rule_services_died"], s["pema_services_died"], s["services_died_total"])
	}
}

// -only curve's lists are checked before anything starts: a bad entry is
// one error naming the flag.
func TestCurveFlags(t *testing.T) {
	ok := opts{curveFactors: "1.3, 1.05,1", curvePeriods: "100000,20000", curveBursts: "0,0.5", curveDur: 20 * time.Second}
	f, p, b, err := curveFlags(ok)
	if err != nil || len(f) != 3 || f[1] != 1.05 || len(p) != 2 || p[1] != 20000 || len(b) != 2 || b[1] != 0.5 {
		t.Fatalf("curveFlags(%+v) = %v, %v, %v, %v", ok, f, p, b, err)
	}
	for _, tc := range []struct {
		o    opts
		flag string
	}{
		{opts{curveFactors: "1,x", curvePeriods: "100000", curveBursts: "0", curveDur: 20 * time.Second}, "-curve:"},
		{opts{curveFactors: "0", curvePeriods: "100000", curveBursts: "0", curveDur: 20 * time.Second}, "-curve:"},
		{opts{curveFactors: "1", curvePeriods: "500", curveBursts: "0", curveDur: 20 * time.Second}, "-curve-periods:"},
		{opts{curveFactors: "1", curvePeriods: "100000", curveBursts: "1.5", curveDur: 20 * time.Second}, "-curve-burst:"},
		{opts{curveFactors: "1", curvePeriods: "100000", curveBursts: "0", curveDur: time.Second}, "-curve-duration"},
	} {
		if _, _, _, err := curveFlags(tc.o); err == nil || !strings.HasPrefix(err.Error(), tc.flag) {
			t.Errorf("curveFlags(%+v): err %v, want one starting %q", tc.o, err, tc.flag)
		}
	}
}

// pema and pema-guarded are judged over their repetitions: CPU the mean
// of each fixed-load run's last third, violations pooled over every
// fixed-load and daily interval; at -slo2 with their own OPTM, RULE's
// CPU shared. Hand-computed: pemag reps' last thirds 0.4, 0.5, 0.6 →
// 0.5; RULE 0.5 → 0 %; OPTM 0.4 → 1.25; 1 violation in 3×3 fixed + 2
// daily intervals → 1/11. At 250 ms: 0.3 vs RULE 0.5 → −40 %, OPTM 0.2
// → 1.5, no violation.
func TestPooledKeys(t *testing.T) {
	e := &env{o: opts{rps: 60, interval: 10 * time.Second, slo2: 250 * time.Millisecond}, svcs: pemaapp.SixServices(), slo: 100 * time.Millisecond}
	ph := func(name, policy, load, set string, cpu, p95 []float64, slo float64) *Phase {
		s := make([]float64, len(p95))
		for i := range s {
			s[i] = slo
		}
		return &Phase{Name: name, Policy: policy, Load: load, Set: set, CPU: cpu, Usage: cpu, P95ms: p95, SLOms: s}
	}
	ps := []*Phase{
		{Name: "optm", Policy: "optm", Final: []float64{0.2, 0.2}},
		{Name: "optm-slo2", Policy: "optm", Final: []float64{0.1, 0.1}, Set: "slo2"},
		ph("pemag", "pema-guarded", "fixed", "", []float64{1, 1, 0.4}, []float64{10, 10, 10}, 100),
		ph("pemag-r2", "pema-guarded", "fixed", "", []float64{1, 1, 0.5}, []float64{10, 200, 10}, 100),
		ph("pemag-r3", "pema-guarded", "fixed", "", []float64{1, 1, 0.6}, []float64{10, 10, 10}, 100),
		ph("pemag-daily", "pema-guarded", "daily", "", []float64{1, 1}, []float64{10, 10}, 100),
		ph("pemag-slo2", "pema-guarded", "fixed", "slo2", []float64{1, 1, 0.3}, []float64{10, 10, 10}, 250),
		ph("rule", "rule", "fixed", "", []float64{1, 0.5}, []float64{300, 300}, 100),
	}
	s := summarize(e, ps)
	for k, want := range map[string]float64{
		"pemag_cpu_vs_rule_pct": 0, "pemag_cpu_vs_optm_ratio": 1.25, "pemag_slo_violation_pct": 100.0 / 11,
		"pemag_cpu_vs_rule_pct_slo250ms": -40, "pemag_cpu_vs_optm_ratio_slo250ms": 1.5, "pemag_slo_violation_pct_slo250ms": 0,
		"rule_slo_violation_pct": 100, "rule_slo_violation_pct_slo250ms": 100,
	} {
		if got, ok := s[k].(float64); !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, s[k], want)
		}
	}
	if s["pemag_reps"] != 3 || s["pemag_intervals"] != 11 {
		t.Errorf("reps %v, intervals %v; want 3, 11", s["pemag_reps"], s["pemag_intervals"])
	}
}

// RULE is tuned per SLO: at -slo2 pema-guarded is judged against RULE's
// own run there (rule-slo2), and against §5's rule (rule-vpa), run once,
// at both. Hand-computed: pemag 0.5 and 0.3; RULE 0.5 and 0.4 → 0 % and
// −25 %; rule-vpa 0.25 → +100 % and +20 %.
func TestPooledKeysRuleSets(t *testing.T) {
	e := &env{o: opts{rps: 60, interval: 10 * time.Second, slo2: 250 * time.Millisecond}, svcs: pemaapp.SixServices(), slo: 100 * time.Millisecond}
	ph := func(name, policy, set string, cpu []float64, slo float64) *Phase {
		p95, s := make([]float64, len(cpu)), make([]float64, len(cpu))
		for i := range s {
			p95[i], s[i] = 10, slo
		}
		return &Phase{Name: name, Policy: policy, Load: "fixed", Set: set, CPU: cpu, Usage: cpu, P95ms: p95, SLOms: s}
	}
	r2 := ph("rule-slo2", "rule", "slo2", []float64{1, 0.4}, 250)
	r2.Target = 0.6
	ps := []*Phase{
		{Name: "optm", Policy: "optm", Final: []float64{0.2, 0.2}},
		{Name: "optm-slo2", Policy: "optm", Final: []float64{0.1, 0.1}, Set: "slo2"},
		ph("pemag", "pema-guarded", "", []float64{1, 1, 0.5}, 100),
		ph("pemag-slo2", "pema-guarded", "slo2", []float64{1, 1, 0.3}, 250),
		ph("rule", "rule", "", []float64{1, 0.5}, 100),
		r2,
		ph("rule-vpa", "rule-vpa", "", []float64{1, 0.25}, 100),
	}
	s := summarize(e, ps)
	for k, want := range map[string]float64{
		"pemag_cpu_vs_rule_pct": 0, "pemag_cpu_vs_rule_pct_slo250ms": -25,
		"pemag_cpu_vs_rule_vpa_pct": 100, "pemag_cpu_vs_rule_vpa_pct_slo250ms": 20,
		"rule_cpu_cores_slo250ms": 0.4, "rule_target_slo250ms": 0.6, "rule_vpa_cpu_cores": 0.25,
	} {
		if got, ok := s[k].(float64); !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, s[k], want)
		}
	}
}

// The plan runs RULE at each SLO and §5's rule once, with their daily curves.
func TestPlanRules(t *testing.T) {
	var names []string
	for _, s := range plan(opts{reps: 1, slo2: 250 * time.Millisecond, pemag: true}) {
		if strings.HasPrefix(s.name, "rule") {
			names = append(names, s.name)
		}
	}
	if got := strings.Join(names, " "); got != "rule rule-vpa rule-daily rule-vpa-daily rule-slo2" {
		t.Fatalf("rule phases: %s", got)
	}
}
