package genl

import (
	"testing"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

// The kernel sends nothing while a group is idle (its period timer stops):
// the sequence must skip those periods so the controller counts them as
// fully unused, exactly like the cgroupfs backend's gaps.
func TestSeqStateIdleGaps(t *testing.T) {
	const period = 100e6
	var w seqState
	var st pb.CpuStat
	rec := func(ts, unused, thr uint64, throttled bool) Record {
		return Record{CgroupID: 1, QuotaNs: 20e6, PeriodNs: period, UnusedNs: unused,
			TimestampNs: ts, ThrottledNs: thr, Throttled: throttled}
	}
	steps := []struct {
		r       Record
		seq     uint64
		usageUs uint64
		thrUs   uint64
	}{
		{rec(1e9, 0, 50e6, true), 0, 20000, 0},
		{rec(1e9+period+3e6, 0, 130e6, true), 1, 20000, 80000}, // timer jitter: still one period
		{rec(1e9+2*period, 5e6, 130e6, false), 2, 15000, 0},
		{rec(1e9+7*period, 20e6, 130e6, false), 7, 0, 0},     // idle for 4 periods in between
		{rec(1e9+7*period+1e6, 25e6, 130e6, false), 8, 0, 0}, // burst: unused > quota, usage clamps at 0
	}
	for i, s := range steps {
		w.fill(&st, s.r)
		if st.PeriodSeq != s.seq || st.UsageUs != s.usageUs || st.ThrottledUs != s.thrUs {
			t.Errorf("step %d: seq %d usage %d throttled %d, want %d %d %d",
				i, st.PeriodSeq, st.UsageUs, st.ThrottledUs, s.seq, s.usageUs, s.thrUs)
		}
		if st.QuotaUs != 20000 || st.PeriodUs != 100000 || st.Throttled != s.r.Throttled {
			t.Errorf("step %d: %v", i, &st)
		}
	}
}
