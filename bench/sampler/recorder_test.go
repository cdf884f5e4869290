package sampler

import (
	"math"
	"testing"
	"time"

	"github.com/escra-dev/escra/bench/report"
)

func TestRecorder(t *testing.T) {
	t0 := time.Unix(100, 0)
	r := &Recorder{Series: "a"}
	snap := func(ms int, aPer, aThr uint64, valid bool) Snapshot {
		return Snapshot{T: t0.Add(time.Duration(ms) * time.Millisecond), Per: []ContainerSample{
			{ID: "ida", Name: "a", CPUUsage: 0.5, CPULimit: 1, MemUsage: 100 << 20, MemLimit: 150 << 20, NrPeriods: aPer, NrThrottled: aThr, Valid: valid},
			{ID: "idb", Name: "b", CPUUsage: 0.25, CPULimit: 2, MemUsage: 10 << 20, MemLimit: 20 << 20, NrPeriods: 7, NrThrottled: 1, Valid: true},
		}}
	}
	r.Add(snap(0, 10, 2, true))
	r.Add(snap(100, 11, 3, true))
	r.Add(snap(200, 0, 0, false)) // a restarting: not counted
	r.Add(snap(300, 1, 1, true))  // a's counters restarted at 0: +1/+1
	var run report.Run
	r.Fill(&run)
	if run.LimitChanges != 0 {
		t.Errorf("%d limit changes, want 0", run.LimitChanges)
	}
	if run.Periods != 2 || run.ThrottledPeriods != 2 {
		t.Errorf("periods %d throttled %d, want 2 and 2", run.Periods, run.ThrottledPeriods)
	}
	if len(run.Slack) != 4 || len(run.Series) != 3 {
		t.Fatalf("%d slack, %d series samples", len(run.Slack), len(run.Series))
	}
	// Slack sums containers: CPU (1−0.5)+(2−0.25) = 2.25; memory 50+10 MiB.
	if s := run.Slack[0]; math.Abs(s.CPUCores-2.25) > 1e-12 || s.MemMiB != 60 || s.TMs != 0 {
		t.Errorf("slack %+v", s)
	}
	if s := run.Slack[2]; s.CPUCores != 1.75 || s.TMs != 200 {
		t.Errorf("slack while a restarts %+v", s)
	}
	if p := run.Series[2]; p.TMs != 300 || p.MemLimitMiB != 150 || p.CPUUsage != 0.5 {
		t.Errorf("series %+v", p)
	}
}
