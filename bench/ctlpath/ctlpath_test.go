package ctlpath

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/ingest"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// BenchmarkPeriodDecision is one container's period through the app: the
// statistic decided under the app's lock (allocator.Books.CPU, the
// invariant check, the update queued on its host) and, once per
// datagram, the acknowledgements of the decisions.
func BenchmarkPeriodDecision(b *testing.B) {
	r, err := New(100)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	for range 2000 { // past the window's warm-up
		r.Stat()
	}
	d0 := r.Decisions
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r.Stat()
	}
	b.StopTimer()
	b.ReportMetric(float64(r.Decisions-d0)/float64(b.N), "decisions/op")
	if r.Decisions == d0 || r.BadStats > 0 {
		b.Fatalf("%d decisions, %d bad stats", r.Decisions-d0, r.BadStats)
	}
}

// BenchmarkBooksCPU is the allocator's decision alone (§IV-D-1).
func BenchmarkBooksCPU(b *testing.B) {
	a, err := allocator.NewBooks("bench", allocator.Budget{CPUCores: 50, MemoryBytes: 1 << 40}, allocator.DefaultParams(), nil)
	if err != nil {
		b.Fatal(err)
	}
	const n = 100
	for i := range n {
		if _, err := a.Join(allocator.Join{Key: allocator.Key(1<<32 | uint64(i+1)), HostMaxUs: 6_400_000}); err != nil {
			b.Fatal(err)
		}
	}
	seq := uint64(0)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if i == 0 {
			seq++
		}
		k := allocator.Key(1<<32 | uint64(i+1))
		q := a.Member(k).QuotaUs
		used := int64(20_000 + (int(seq)*7919+i*104729)%60_000)
		a.CPU(k, allocator.Stat{Seq: seq, QuotaUs: q, PeriodUs: 100_000, UnusedUs: max(q-used, 0),
			Throttled: used >= q, UsageUs: min(used, q)})
		i = (i + 1) % n
	}
}

// BenchmarkOOMVerdict is one OOM request from the session's reader to its
// verdict: the grant decided from the books, the raised limit queued,
// its acknowledgement, and the verdict.
func BenchmarkOOMVerdict(b *testing.B) {
	r, err := New(100)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		r.OOM()
	}
	b.StopTimer()
	if r.Host.Granted < b.N/2 {
		b.Fatalf("%d verdicts (%d granted; denied: %q) for %d requests", r.Host.Verdicts, r.Host.Granted, r.Host.Reason, b.N)
	}
}

// datagram is a full telemetry datagram of 65 statistics.
func datagram(b *testing.B) []byte {
	tb := &pb.TelemetryBatch{SessionId: 7, BatchSeq: 1, PeriodUs: 100000}
	for i := range 65 {
		tb.Stats = append(tb.Stats, &pb.CpuStat{Handle: uint32(i + 1), PeriodSeq: 100, QuotaUs: 20000, UnusedUs: 5000, UsageUs: 15000})
	}
	data, err := proto.Marshal(tb)
	if err != nil || len(data) > wire.MaxDatagramBytes {
		b.Fatalf("datagram of %d bytes: %v", len(data), err)
	}
	return data
}

// BenchmarkDecodeDatagram is the UDP reader's decode (ingest.Decoder).
func BenchmarkDecodeDatagram(b *testing.B) {
	data := datagram(b)
	var d ingest.Decoder
	var out []ingest.Stat
	b.ReportAllocs()
	for b.Loop() {
		_, out, _, _ = d.Decode(data, out)
	}
}

// BenchmarkDecodeDatagramProto is the same with proto.Unmarshal
// (ingest.Decode), what the reader used before.
func BenchmarkDecodeDatagramProto(b *testing.B) {
	data := datagram(b)
	var out []ingest.Stat
	b.ReportAllocs()
	for b.Loop() {
		_, out, _, _ = ingest.Decode(data, &pb.TelemetryBatch{}, out)
	}
}
