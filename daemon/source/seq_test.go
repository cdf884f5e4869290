package source

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

// A period whose quota was raised midway (the write refilled the runtime)
// reports the usage the reader measured, not quota − runtime left, which
// lost what ran before the write; unused follows it.
func TestSeqStateUsesMeasuredUsage(t *testing.T) {
	var w seqState
	var st pb.CpuStat
	w.fill(&st, Record{QuotaNs: 10e6, PeriodNs: 100e6, UnusedNs: 0, TimestampNs: 1e9})
	// Raised 10 → 20 ms after using all 10; 3 ms of the new 20 used.
	w.fill(&st, Record{QuotaNs: 20e6, PeriodNs: 100e6, UnusedNs: 17e6, TimestampNs: 1e9 + 100e6, UsedNs: 13e6, HasUsed: true})
	if st.UsageUs != 13000 || st.UnusedUs != 7000 {
		t.Errorf("measured period: usage %d unused %d µs, want 13000 and 7000", st.UsageUs, st.UnusedUs)
	}
	w.fill(&st, Record{QuotaNs: 20e6, PeriodNs: 100e6, UnusedNs: 5e6, TimestampNs: 1e9 + 200e6, UsedNs: 30e6, HasUsed: true})
	if st.UsageUs != 30000 || st.UnusedUs != 0 {
		t.Errorf("more than the quota measured: usage %d unused %d µs, want 30000 and 0", st.UsageUs, st.UnusedUs)
	}
	w.fill(&st, Record{QuotaNs: 20e6, PeriodNs: 100e6, UnusedNs: 5e6, TimestampNs: 1e9 + 300e6})
	if st.UsageUs != 15000 || st.UnusedUs != 5000 {
		t.Errorf("unmeasured period: usage %d unused %d µs, want 15000 and 5000", st.UsageUs, st.UnusedUs)
	}
}

// An event names the period in progress as its record will be numbered:
// the one after the last record, plus the idle periods since.
func TestSeqStateEventNamesThePeriodInProgress(t *testing.T) {
	const period = 100e6
	var w SeqState
	var st pb.CpuStat
	if got := w.InProgress(5e9, period); got != 0 {
		t.Fatalf("before any record: %d, want 0", got)
	}
	w.Fill(&st, Record{QuotaNs: 20e6, PeriodNs: period, TimestampNs: 1e9})
	for _, c := range []struct {
		now  uint64
		want uint64
	}{
		{1e9 + 1, 1}, {1e9 + period - 1, 1}, {1e9 + period + 1, 2}, {1e9 + 3*period + 5, 4},
	} {
		if got := w.InProgress(c.now, period); got != c.want {
			t.Errorf("%d ns after the record: period %d, want %d", c.now-1e9, got, c.want)
		}
	}
	// The record of the period that held the event gets that number.
	w.Fill(&st, Record{QuotaNs: 20e6, PeriodNs: period, TimestampNs: 1e9 + 4*period})
	if st.PeriodSeq != 4 {
		t.Fatalf("record after the idle gap: seq %d, want 4", st.PeriodSeq)
	}
}
