package report

import (
	"strings"
	"testing"
)

// Pooling two runs of two repetitions gives four repetitions per cell and
// policy, the same per-cell means, and keeps both runs' budgets; runs
// pinned differently do not pool.
func TestPool(t *testing.T) {
	a, b := synthetic(), synthetic()
	b.Commit, b.Date = "def5678", "2026-11-24T05:00:00Z"
	p, err := Pool([]*Results{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Runs) != len(a.Runs)+len(b.Runs) || len(p.Budgets) != len(a.Budgets)+len(b.Budgets) {
		t.Fatalf("pooled %d runs and %d budgets from %d+%d and %d+%d", len(p.Runs), len(p.Budgets), len(a.Runs), len(b.Runs), len(a.Budgets), len(b.Budgets))
	}
	aggs := Aggregate(p)
	k := Key{Cell{"demo-http", "burst"}, "escra"}
	if got := aggs[k].Runs; got != 4 {
		t.Fatalf("%v: %d repetitions pooled, want 4", k, got)
	}
	if got, want := aggs[k].P999Us.Mean, Aggregate(a)[k].P999Us.Mean; got != want {
		t.Fatalf("%v: pooled p99.9 mean %v, one run's %v", k, got, want)
	}
	if p.Commit != "abc1234+def5678" || !strings.Contains(p.Date, " to ") || !strings.Contains(strings.Join(p.Notes, " "), "Pooled from 2 runs") {
		t.Fatalf("pooled commit %q, date %q, notes %q", p.Commit, p.Date, p.Notes)
	}
	b.CFSBurst = 1
	if _, err := Pool([]*Results{a, b}); err == nil || !strings.Contains(err.Error(), "CFS burst") {
		t.Fatalf("pooling a run with CFS burst and one without: err %v", err)
	}
	b.CFSBurst = 0
	b.Pinning.ClientCPUs = "0-1"
	if _, err := Pool([]*Results{a, b}); err == nil || !strings.Contains(err.Error(), "pinned") {
		t.Fatalf("pooling runs pinned differently: err %v", err)
	}
}
