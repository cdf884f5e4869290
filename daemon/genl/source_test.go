package genl

import (
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/oom"
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

type countSink struct{ ooms []oom.Event }

func (c *countSink) CPU(*pb.CpuStat)  {}
func (c *countSink) Flush()           {}
func (c *countSink) OOM(ev oom.Event) { c.ooms = append(c.ooms, ev) }

// Requests of one group during an episode reach the agent once; one still
// unanswered after redeliverAfter is handed over again (the agent skips
// events while a verdict is in flight).
func TestSourceOOMEpisodes(t *testing.T) {
	s := &Source{byID: map[uint64]*watched{42: {h: 7}}, byH: map[uint32]uint64{7: 42}, pending: map[uint32]*pendingOOM{}}
	var sink countSink
	s.oom(OOMRequest{ID: 1, CgroupID: 42, MaxBytes: 32 << 20}, &sink)
	s.oom(OOMRequest{ID: 2, CgroupID: 42, MaxBytes: 32 << 20}, &sink)
	if len(sink.ooms) != 1 || sink.ooms[0].Handle != 7 || sink.ooms[0].Limit != 32<<20 {
		t.Fatalf("events after two requests: %+v, want one for handle 7", sink.ooms)
	}
	if got := s.pending[7].ids; len(got) != 2 {
		t.Fatalf("pending ids %v, want both", got)
	}
	s.redeliver(&sink)
	if len(sink.ooms) != 1 {
		t.Fatalf("redelivered a fresh event: %d events", len(sink.ooms))
	}
	s.pending[7].delivered = time.Now().Add(-2 * redeliverAfter)
	s.redeliver(&sink)
	if len(sink.ooms) != 2 || sink.ooms[1].Handle != 7 {
		t.Fatalf("stale event not redelivered: %+v", sink.ooms)
	}
	// A verdict with nothing pending is a no-op (Resolve is idempotent).
	delete(s.pending, 7)
	if err := s.reply(7, true); err != nil {
		t.Fatal(err)
	}
}
