package matrix

import (
	"math"
	"testing"
	"time"
)

// offset-pair's second service bursts while the first is calm: in the
// offline model their busy halves do not overlap.
func TestOffsetPairPeaksApart(t *testing.T) {
	w, ok := WorkloadByName("offset-pair")
	if !ok || !w.Offset {
		t.Fatal("offset-pair is not an offset workload")
	}
	d, err := DemandModel(w, ClientRun{Load: "burst", Ports: []int{1, 2}, Duration: 12 * time.Second, Seed: 3, BurstCycle: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mean := func(s []float64, from, to int) float64 {
		sum := 0.0
		for _, v := range s[from:to] {
			sum += v
		}
		return sum / float64(to-from)
	}
	// First 3 s: service 0 calm, service 1 bursting; next 3 s the reverse.
	if a, b := mean(d[0], 0, 30), mean(d[1], 0, 30); !(b > 4*a && b > 0.15) {
		t.Errorf("first half cycle: service 0 %.3f, service 1 %.3f cores", a, b)
	}
	if a, b := mean(d[0], 30, 60), mean(d[1], 30, 60); !(a > 4*b && a > 0.15) {
		t.Errorf("second half cycle: service 0 %.3f, service 1 %.3f cores", a, b)
	}
}

func TestPeriodicShape(t *testing.T) {
	p := periodicShape{Every: 2 * time.Second, Phase: time.Second, Spacing: 10 * time.Millisecond, Count: 3}
	got := p.Schedule(4 * time.Second)
	want := []time.Duration{1000, 1010, 1020, 3000, 3010, 3020}
	if len(got) != len(want) {
		t.Fatalf("schedule %v", got)
	}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("schedule %v, want %v ms", got, want)
		}
	}
	if p.Rate(1005*time.Millisecond) != 100 || p.Rate(1500*time.Millisecond) != 0 {
		t.Error("rate is not 100/s inside the job and 0 outside")
	}
}

func TestPolicyNames(t *testing.T) {
	for p, k := range map[string]float64{"escra": 1.5, "escra-paper": 1.5, "escra-k075": 0.75, "escra-k050+batch": 0.5, "static15": 0} {
		if got := FrontierK(p); got != k {
			t.Errorf("FrontierK(%s) = %v, want %v", p, got, k)
		}
	}
	if EscraBase("escra-k100") != "escra" || EscraBase("escra-paper") != "escra-paper" {
		t.Error("EscraBase")
	}
	pk := Peak{CPU: 0.4, CPUMon: 0.2, CPUP90: 0.1}
	for p, want := range map[string]float64{"static15": 0.6, "static05": 0.2, "static15mon": 0.3, "vpastatic": 0.115} {
		k, c, ok := staticRule(p, pk)
		if !ok || k*c < want-1e-9 || k*c > want+1e-9 {
			t.Errorf("%s: %v × %v, want %v", p, k, c, want)
		}
	}
	c := Config{AppCores: 1}
	if got := c.EscraBudget([]Peak{{CPU: 0.4}, {CPU: 0.8}}, "escra-k075"); math.Abs(got-0.9) > 1e-9 {
		t.Errorf("escra-k075 budget %v, want 0.9 (static075's)", got)
	}
	if got := c.EscraBudget([]Peak{{CPU: 0.4}, {CPU: 0.8}}, "escra"); math.Abs(got-1.6) > 1e-9 {
		t.Errorf("escra budget %v, want 1.6 (static15's, capped at the app's CPU)", got)
	}
	if !OffsetOnly("vpastatic") || OffsetOnly("static15") || OffsetOnly("escra") {
		t.Error("OffsetOnly")
	}
	cfg := Config{Workloads: []string{"demo-http", "offset-pair"}, Loads: []string{"burst"}, Policies: []string{"static15", "static15mon", "escra-k075"}}
	for _, cell := range cfg.Cells() {
		n := len(cfg.cellPolicies(cell))
		if (cell.Workload == "demo-http" && n != 1) || (cell.Workload == "offset-pair" && n != 3) {
			t.Errorf("%v runs %d policies", cell, n)
		}
	}
	if err := (Config{Workloads: []string{"offset-pair"}, Loads: []string{"burst"}, Policies: []string{"escra-k150"}}).Validate(); err == nil {
		t.Error("escra-k150 (escra's own budget under another name) was accepted")
	}
}
