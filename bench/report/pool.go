package report

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Pool merges runs of the same benchmark into one Results, their
// repetitions numbered on (run k's rep r becomes offset_k + r), so the
// report's intervals rest on every repetition of every run. Three
// repetitions per run are what fits in `make bench`'s 35 minutes; a
// floor whose sign moves between runs needs more. Runs on
// other machines, pinnings or modes do not pool. Each run's budgets are
// kept (each run profiled anew, so they differ a little from run to
// run; within a run Escra's equals Σ static15).
func Pool(rs []*Results) (*Results, error) {
	if len(rs) == 0 {
		return nil, fmt.Errorf("pool: no results")
	}
	out := &Results{Machine: rs[0].Machine, Mode: rs[0].Mode, Pinning: rs[0].Pinning, Overheads: rs[0].Overheads, CFSBurst: rs[0].CFSBurst}
	var commits, dates []string
	offset := 0
	for i, r := range rs {
		switch {
		case r.Machine.CPUs != out.Machine.CPUs || r.Machine.Hostname != out.Machine.Hostname:
			return nil, fmt.Errorf("pool: run %d is from %s (%d CPUs), run 0 from %s (%d CPUs)", i, r.Machine.Hostname, r.Machine.CPUs, out.Machine.Hostname, out.Machine.CPUs)
		case r.Pinning != out.Pinning:
			return nil, fmt.Errorf("pool: run %d pinned %+v, run 0 %+v", i, r.Pinning, out.Pinning)
		case r.Mode != out.Mode:
			return nil, fmt.Errorf("pool: run %d is a %s run, run 0 a %s run", i, r.Mode, out.Mode)
		case r.CFSBurst != out.CFSBurst:
			return nil, fmt.Errorf("pool: run %d ran with a CFS burst of %g × quota, run 0 with %g", i, r.CFSBurst, out.CFSBurst)
		}
		top := -1
		for _, run := range r.Runs {
			run.Rep += offset
			top = max(top, run.Rep)
			out.Runs = append(out.Runs, run)
		}
		offset = top + 1
		out.Budgets = append(out.Budgets, r.Budgets...)
		for _, n := range r.Notes {
			if !slices.Contains(out.Notes, n) {
				out.Notes = append(out.Notes, n)
			}
		}
		if !slices.Contains(commits, r.Commit) {
			commits = append(commits, r.Commit)
		}
		dates = append(dates, r.Date)
	}
	sort.Strings(dates)
	out.Commit = strings.Join(commits, "+")
	out.Date = dates[0]
	if len(dates) > 1 {
		out.Date += " to " + dates[len(dates)-1]
	}
	out.Notes = append(out.Notes, fmt.Sprintf("Pooled from %d runs (%s, commits %s): repetitions numbered on across runs; the Fairness table lists each run's budgets.",
		len(rs), strings.Join(dates, ", "), strings.Join(commits, ", ")))
	return out, nil
}
