package main

import (
	"fmt"
	"strings"
	"time"
)

// step is one phase of a run, planned before anything starts (escrad
// is told every app name at its start).
type step struct {
	name   string // the phase's name: its keys and its app's name
	policy string // optm, pema, pema-guarded, rule, rule-vpa, escra
	daily  bool
	rep    int    // 1-based repetition
	set    string // "": the bench's SLO; "slo2": -slo2
}

// plan lists the run's phases in order: at the bench's SLO OPTM, then
// each repetition of pema and pema-guarded at the fixed load, RULE (the
// HPA, its target tuned to the SLO), §5's rule (rule-vpa) and Escra,
// then the daily curve (pema and pema-guarded repeated, RULE at its
// tuned target, rule-vpa and Escra once); at -slo2 the same for OPTM,
// pema, pema-guarded and RULE (rule-vpa and Escra do not read the SLO:
// their runs at the bench's SLO are judged against -slo2 too).
func plan(o opts) []step {
	var out []step
	for _, set := range []string{"", "slo2"} {
		if set == "slo2" && o.slo2 <= 0 {
			break
		}
		sfx := ""
		if set != "" {
			sfx = "-" + set
		}
		rep := func(n int) string {
			if n == 1 {
				return ""
			}
			return fmt.Sprintf("-r%d", n)
		}
		if o.want("optm") {
			out = append(out, step{name: "optm" + sfx, policy: "optm", rep: 1, set: set})
		}
		for r := 1; r <= o.reps; r++ {
			if o.want("pema") {
				out = append(out, step{name: "pema" + rep(r) + sfx, policy: "pema", rep: r, set: set})
			}
			if o.pemag && o.want("pemag") {
				out = append(out, step{name: "pemag" + rep(r) + sfx, policy: "pema-guarded", rep: r, set: set})
			}
		}
		if o.want("rule") {
			out = append(out, step{name: "rule" + sfx, policy: "rule", rep: 1, set: set})
			if set == "" {
				out = append(out, step{name: "rule-vpa", policy: "rule-vpa", rep: 1})
			}
		}
		if set == "" && o.escraEnabled && o.want("escra") {
			out = append(out, step{name: "escra", policy: "escra", rep: 1})
		}
		if o.skipDaily || !o.want("daily") {
			continue
		}
		for r := 1; r <= o.reps; r++ {
			out = append(out, step{name: "pema-daily" + rep(r) + sfx, policy: "pema", daily: true, rep: r, set: set})
			if o.pemag {
				out = append(out, step{name: "pemag-daily" + rep(r) + sfx, policy: "pema-guarded", daily: true, rep: r, set: set})
			}
		}
		if set == "" {
			out = append(out, step{name: "rule-daily", policy: "rule", daily: true, rep: 1},
				step{name: "rule-vpa-daily", policy: "rule-vpa", daily: true, rep: 1})
			if o.escraEnabled {
				out = append(out, step{name: "escra-daily", policy: "escra", daily: true, rep: 1})
			}
		}
	}
	return out
}

// appName is a phase's app in the controller.
func appName(phase string) string { return "pema-bench-" + phase }

// quick is -quick: a smoke of every phase and key in about three
// minutes, not a measurement (one repetition, 2 s intervals).
func quick(o *opts) {
	o.interval, o.pemaSteps, o.sloSteps, o.ruleSteps, o.dailySteps = 2*time.Second, 5, 0, 3, 3
	o.optmWindow, o.optmTrials, o.reps, o.escraEnabled = time.Second, 3, 1, false
}

// setSuffix is the summary keys' suffix of a set: "" or "_slo250ms".
func setSuffix(o opts, set string) string {
	if set == "" {
		return ""
	}
	return "_slo" + strings.ReplaceAll(fmt.Sprint(o.slo2), ".", "_")
}
