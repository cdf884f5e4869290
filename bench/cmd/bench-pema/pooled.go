package main

// pooled adds the keys that compare pema and pema-guarded over their
// repetitions, at the bench's SLO and at -slo2 (suffix _slo250ms):
//
//   - <p>_cpu_vs_rule_pct: the mean over repetitions of each fixed-load
//     run's settled CPU (the last third of its intervals at the first
//     SLO), against RULE's (the second half of its run);
//   - <p>_cpu_vs_optm_ratio: the same CPU over OPTM's at that SLO;
//   - <p>_slo_violation_pct: the share of intervals whose client p95
//     broke the SLO, pooled over every repetition's fixed-load intervals
//     (the descent included) and daily-curve intervals (the ramps and
//     bursts included);
//
// and <p>_cpu_vs_rule_vpa_pct against §5's rule (rule-vpa, the bench's
// RULE until 2026-12-02); RULE is the HPA tuned to each SLO (rule,
// rule-slo2), rule-vpa runs once and is judged at both;
//
// with <p> pema (the paper's policy) and pemag (pema-guarded), and
// <p>_reps, <p>_intervals, <p>_cpu_cores_mean, <p>_services_died beside
// them. The pema_* keys of one run before repetitions existed keep
// their meaning under pema_run1_*. RULE's and Escra's violations at
// -slo2 judge their own runs' p95 against it.
func pooled(e *env, ps []*Phase, out map[string]any) {
	for _, k := range []string{"pema_cpu_vs_rule_pct", "pema_slo_violation_pct", "pema_cpu_vs_optm_ratio"} {
		if v, ok := out[k]; ok {
			out["pema_run1_"+k[len("pema_"):]] = v
		}
	}
	rv := findPhase(ps, "rule-vpa")
	for _, set := range []string{"", "slo2"} {
		sfx := setSuffix(e.o, set)
		rl := findPhase(ps, "rule")
		if r2 := findPhase(ps, "rule-slo2"); set == "slo2" && r2 != nil {
			rl = r2
			out["rule_cpu_cores"+sfx] = mean(r2.CPU[len(r2.CPU)/2:])
			out["rule_target"+sfx] = r2.Target
			out["rule_tuned_ok"+sfx] = r2.TunedOK
		}
		op := findPhase(ps, "optm"+map[string]string{"": "", "slo2": "-slo2"}[set])
		if set == "slo2" {
			if op == nil {
				continue
			}
			slo := float64(e.o.slo2) / 1e6
			out["optm_cpu_cores"+sfx] = sum(op.Final)
			for _, n := range []string{"rule", "rule-vpa", "escra", "rule-daily", "rule-vpa-daily", "escra-daily"} {
				p := findPhase(ps, n)
				if r2 := findPhase(ps, "rule-slo2"); n == "rule" && r2 != nil {
					p = r2 // RULE tuned to -slo2: its own run
				}
				if p != nil {
					at := make([]float64, len(p.P95ms))
					for i := range at {
						at[i] = slo
					}
					out[keyName(n)+"_slo_violation_pct"+sfx] = violPct(p.P95ms, at)
				}
			}
		}
		for _, pol := range []struct{ key, policy string }{{"pema", "pema"}, {"pemag", "pema-guarded"}} {
			var cpus []float64
			var viol, n, reps, died int
			for _, p := range ps {
				if p.Policy != pol.policy || p.Set != set {
					continue
				}
				died += len(p.Died)
				if p.Load == "daily" {
					viol += countViol(p.P95ms, p.SLOms)
					n += len(p.P95ms)
					continue
				}
				f := fixedSteps(p)
				if f == 0 {
					continue
				}
				reps++
				cpus = append(cpus, mean(p.CPU[f-(f+2)/3:f]))
				viol += countViol(p.P95ms[:f], p.SLOms[:f])
				n += f
			}
			if reps == 0 {
				continue
			}
			cpu := mean(cpus)
			k := pol.key
			out[k+"_reps"+sfx], out[k+"_intervals"+sfx], out[k+"_cpu_cores_mean"+sfx] = reps, n, cpu
			out[k+"_slo_violation_pct"+sfx] = 100 * float64(viol) / float64(max(n, 1))
			out[k+"_services_died"+sfx] = died
			if rl != nil && len(rl.CPU) > 0 {
				out[k+"_cpu_vs_rule_pct"+sfx] = 100 * (cpu/mean(rl.CPU[len(rl.CPU)/2:]) - 1)
			}
			if rv != nil && len(rv.CPU) > 0 {
				out[k+"_cpu_vs_rule_vpa_pct"+sfx] = 100 * (cpu/mean(rv.CPU[len(rv.CPU)/2:]) - 1)
			}
			if op != nil && sum(op.Final) > 0 {
				out[k+"_cpu_vs_optm_ratio"+sfx] = cpu / sum(op.Final)
			}
		}
	}
}

func countViol(p95, slo []float64) int {
	n := 0
	for i := range p95 {
		if p95[i] > slo[i] {
			n++
		}
	}
	return n
}

func keyName(phase string) string {
	b := []byte(phase)
	for i, c := range b {
		if c == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}
