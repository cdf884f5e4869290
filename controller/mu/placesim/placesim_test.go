package placesim

import (
	"math"
	"testing"
)

func TestMaxMin(t *testing.T) {
	got := MaxMin(10, []float64{2, 8, 5})
	want := []float64{2, 4, 4}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("MaxMin(10, 2 8 5) = %v, want %v", got, want)
		}
	}
	if got := MaxMin(100, []float64{1, 2}); got[0] != 1 || got[1] != 2 {
		t.Fatalf("enough for all: %v", got)
	}
}

// §3.5.3 at a tenth of the cases: DRF with any node selection is fairer
// than the Kubernetes default on CPU, and no algorithm places more than
// the cluster holds.
func TestDRFFairerThanDefault(t *testing.T) {
	cfg := Paper()
	cfg.Cases = 8
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	def := res["default"]
	for _, a := range Algorithms[1:] {
		r := res[a]
		t.Logf("%s: U_cpu %.2f cores (default %.2f), I_cpu %.2f, U_mem %.0f MiB (default %.0f), pods %.0f", a, r.UnfairCPU, def.UnfairCPU, r.IneffCPU, r.UnfairMem, def.UnfairMem, r.PodsPlaced)
		if r.UnfairCPU >= def.UnfairCPU {
			t.Fatalf("%s CPU unfairness %.2f not below default's %.2f", a, r.UnfairCPU, def.UnfairCPU)
		}
		// Demand exceeds capacity by design: some is always unmet.
		if r.IneffCPU <= 0 {
			t.Fatalf("%s: no unmet CPU demand in an overcommitted cluster", a)
		}
	}
	if _, err := Run(Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
}
