package ingest

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

func TestDecodeResolvesPeriodAndDropsAbsurd(t *testing.T) {
	b, _ := proto.Marshal(&pb.TelemetryBatch{SessionId: 3, PeriodUs: 100000, Stats: []*pb.CpuStat{
		{Handle: 1, PeriodSeq: 4, QuotaUs: 50000, UnusedUs: 10000, Throttled: true, UsageUs: 40000},
		{Handle: 2, PeriodUs: 50000, QuotaUs: -1},
		{Handle: 3, UnusedUs: -1},
		{Handle: 4, QuotaUs: -2},
	}})
	sess, stats, bad, err := Decode(b, &pb.TelemetryBatch{}, nil)
	if err != nil || sess != 3 || bad != 2 || len(stats) != 2 {
		t.Fatalf("sess %d bad %d stats %+v err %v", sess, bad, stats, err)
	}
	if s := stats[0]; s.Handle != 1 || s.Seq != 4 || s.PeriodUs != 100000 || s.UnusedUs != 10000 || !s.Throttled || s.UsageUs != 40000 {
		t.Fatalf("stat 0: %+v", s)
	}
	if stats[1].PeriodUs != 50000 {
		t.Fatalf("per-stat period not used: %+v", stats[1])
	}
	b, _ = proto.Marshal(&pb.TelemetryBatch{Stats: []*pb.CpuStat{{Handle: 1, PeriodUs: 1}}})
	if _, _, _, err := Decode(b, &pb.TelemetryBatch{}, nil); err == nil {
		t.Fatal("batch without session accepted")
	}
	if _, _, _, err := Decode(make([]byte, 1401), &pb.TelemetryBatch{}, nil); err == nil {
		t.Fatal("oversized datagram accepted")
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := proto.Marshal(&pb.TelemetryBatch{SessionId: 1, BatchSeq: 2, PeriodUs: 100000, Stats: []*pb.CpuStat{
		{Handle: 1, PeriodSeq: 9, QuotaUs: 50000, UnusedUs: 100, Throttled: true, NrThrottled: 3, ThrottledUs: 5, UsageUs: 49900}}})
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x01, 0x22, 0x02, 0x08})
	f.Add(make([]byte, 1500))
	f.Fuzz(func(t *testing.T, data []byte) {
		sess, stats, bad, err := Decode(data, &pb.TelemetryBatch{}, nil)
		if err != nil {
			return
		}
		if sess == 0 || bad < 0 {
			t.Fatalf("accepted session 0 or negative bad")
		}
		for _, s := range stats {
			if s.PeriodUs <= 0 || s.UnusedUs < 0 || s.QuotaUs < -1 {
				t.Fatalf("absurd stat passed: %+v", s)
			}
		}
	})
}

// A throttle event keeps its flag through decoding and is validated like
// any stat.
func TestDecodeKeepsMidPeriod(t *testing.T) {
	b, _ := proto.Marshal(&pb.TelemetryBatch{SessionId: 3, PeriodUs: 100000, Stats: []*pb.CpuStat{
		{Handle: 1, PeriodSeq: 9, QuotaUs: 20000, NrThrottled: 5, MidPeriod: true},
		{Handle: 2, PeriodSeq: 9, QuotaUs: -3, MidPeriod: true},
		{Handle: 1, PeriodSeq: 9, QuotaUs: 20000, Throttled: true, UsageUs: 20000},
	}})
	_, stats, bad, err := Decode(b, &pb.TelemetryBatch{}, nil)
	if err != nil || bad != 1 || len(stats) != 2 {
		t.Fatalf("bad %d stats %+v err %v", bad, stats, err)
	}
	if !stats[0].MidPeriod || stats[0].Seq != 9 || stats[0].QuotaUs != 20000 || stats[1].MidPeriod {
		t.Fatalf("stats %+v", stats)
	}
}
