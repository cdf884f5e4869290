package wysiwygsim

import (
	"testing"

	"github.com/escra-dev/escra/internal/wysiwyg"
)

// The simulator's shape: best-effort never refuses for WYSIWYG; with
// every task C1 principle-hard refuses some; with few C1 it refuses
// (almost) none; s is a percentage.
func TestSimulatorShape(t *testing.T) {
	tr := Synthesize(TraceConfig{Machines: 20, Tasks: 3000, Seed: 1})
	for _, opt := range []bool{false, true} {
		be, err := Run(tr, Config{C1Fraction: 1, Mode: wysiwyg.BestEffort, Optimized: opt})
		if err != nil {
			t.Fatal(err)
		}
		if be.RejectWys != 0 || be.C1Placed == 0 {
			t.Errorf("best-effort opt=%v: %+v", opt, be)
		}
		hard, err := Run(tr, Config{C1Fraction: 1, Mode: wysiwyg.Hard, Optimized: opt})
		if err != nil {
			t.Fatal(err)
		}
		if hard.RejectWys == 0 || hard.SPct < 0 || hard.SPct > 100 {
			t.Errorf("hard at 100%% C1 opt=%v: %+v", opt, hard)
		}
		low, _ := Run(tr, Config{C1Fraction: 0.1, Mode: wysiwyg.Hard, Optimized: opt})
		if low.RPct > hard.RPct {
			t.Errorf("r at 10%% C1 %.1f > at 100%% %.1f", low.RPct, hard.RPct)
		}
		if low.NoCapacity == 0 {
			t.Errorf("heavy load refused nothing for CPU: %+v", low)
		}
	}
}
