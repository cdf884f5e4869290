package wire

import (
	"bytes"
	"io"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

// busyStat is a realistic record after an hour of 100 ms periods.
func busyStat(h uint32) *pb.CpuStat {
	return &pb.CpuStat{
		Handle: h, PeriodSeq: 36_000, QuotaUs: 150_000, UnusedUs: 42_123,
		Throttled: true, NrThrottled: 1234, ThrottledUs: 20_000, UsageUs: 107_877,
	}
}

func TestBatcherKeepsDatagramsSmallAndLosesNothing(t *testing.T) {
	b := Batcher{SessionID: 7, PeriodUs: 100_000}
	var got []*pb.CpuStat
	var datagrams int
	emit := func(d []byte) error {
		if len(d) > MaxDatagramBytes {
			t.Fatalf("datagram of %d bytes", len(d))
		}
		var batch pb.TelemetryBatch
		if err := DecodeBatch(d, &batch); err != nil {
			t.Fatal(err)
		}
		if batch.BatchSeq != uint64(datagrams+1) {
			t.Fatalf("batch seq %d, want %d", batch.BatchSeq, datagrams+1)
		}
		datagrams++
		got = append(got, batch.Stats...)
		return nil
	}
	const n = 1000
	for i := range n {
		if err := b.Add(busyStat(uint32(i)), emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(emit); err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d stats arrived, want %d", len(got), n)
	}
	for i, s := range got {
		if !proto.Equal(s, busyStat(uint32(i))) {
			t.Fatalf("stat %d changed on the wire: %v", i, s)
		}
	}
	// Full datagrams must be nearly full: under 40 bytes per stat on the wire.
	perStat := float64(datagrams*MaxDatagramBytes) / n
	if perStat > 40 {
		t.Fatalf("%.1f wire bytes per stat (%d datagrams for %d stats), want <= 40", perStat, datagrams, n)
	}
}

// Every field at its widest still leaves room for a batch of many stats.
func TestWorstCaseStatFitsManyPerDatagram(t *testing.T) {
	huge := &pb.CpuStat{Handle: math.MaxUint32, PeriodSeq: math.MaxUint64, QuotaUs: -1, PeriodUs: math.MaxUint32,
		UnusedUs: -1, Throttled: true, NrThrottled: math.MaxUint64, ThrottledUs: math.MaxUint64, UsageUs: math.MaxUint64}
	if n := statSize(huge); n*10 > MaxDatagramBytes {
		t.Fatalf("worst-case stat is %d bytes: fewer than 10 fit a datagram", n)
	}
}

func TestDecodeBatchRejectsBadInput(t *testing.T) {
	var batch pb.TelemetryBatch
	for name, data := range map[string][]byte{
		"oversized":  bytes.Repeat([]byte{0}, MaxDatagramBytes+1),
		"truncated":  {0x22, 0x10, 0x08},
		"no session": {},
		"bad wire":   {0xff, 0xff, 0xff},
	} {
		if err := DecodeBatch(data, &batch); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewEnvelopeWriter(&buf)
	sent := []*pb.Envelope{
		{RequestId: 1, Body: &pb.Envelope_Hello{Hello: &pb.HostHello{HostId: "h1", Cores: 2}}},
		{RequestId: 2, Body: &pb.Envelope_OomRequest{OomRequest: &pb.OomRequest{Handle: 3, PagesWanted: 1}}},
		{Body: &pb.Envelope_SetLimits{SetLimits: &pb.SetLimits{Updates: []*pb.LimitUpdate{
			{Handle: 1, Generation: 9, Limits: &pb.Limits{CpuQuotaUs: 50_000}},
			{Handle: 2, Generation: 4, Limits: &pb.Limits{MemoryLimitBytes: 1 << 30}},
		}}}},
	}
	for _, e := range sent {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	r := NewEnvelopeReader(&buf)
	for i, want := range sent {
		var got pb.Envelope
		if err := r.Read(&got); err != nil {
			t.Fatalf("envelope %d: %v", i, err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("envelope %d: got %v want %v", i, &got, want)
		}
	}
	var env pb.Envelope
	if err := r.Read(&env); err != io.EOF {
		t.Fatalf("after the last envelope: %v, want io.EOF", err)
	}
}

func TestEnvelopeReaderRejectsBadInput(t *testing.T) {
	for name, data := range map[string][]byte{
		"oversized length": {0xff, 0xff, 0xff, 0x7f},
		"truncated":        {0x05, 0x08},
		"empty body":       {0x02, 0x08, 0x01},
		"garbage":          {0x03, 0xff, 0xff, 0xff},
	} {
		var env pb.Envelope
		err := NewEnvelopeReader(bytes.NewReader(data)).Read(&env)
		if err == nil || err == io.EOF {
			t.Errorf("%s: got %v, want an error", name, err)
		}
	}
	big := &pb.Envelope{Body: &pb.Envelope_Error{Error: &pb.Error{Message: strings.Repeat("x", MaxEnvelopeBytes)}}}
	if err := NewEnvelopeWriter(io.Discard).Write(big); err == nil {
		t.Error("writer sent an oversized envelope")
	}
}

func FuzzDecodeBatch(f *testing.F) {
	b := Batcher{SessionID: 3, PeriodUs: 100_000}
	_ = b.Add(busyStat(1), func([]byte) error { return nil })
	_ = b.Flush(func(d []byte) error { f.Add(append([]byte(nil), d...)); return nil })
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var batch pb.TelemetryBatch
		if err := DecodeBatch(data, &batch); err != nil {
			return
		}
		if batch.SessionId == 0 || len(data) > MaxDatagramBytes {
			t.Fatalf("accepted an invalid batch")
		}
	})
}

func FuzzEnvelopeReader(f *testing.F) {
	b, _ := AppendEnvelope(nil, &pb.Envelope{RequestId: 1, Body: &pb.Envelope_Heartbeat{Heartbeat: &pb.Heartbeat{Seq: 1}}})
	f.Add(b)
	f.Add([]byte{0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewEnvelopeReader(bytes.NewReader(data))
		for range 64 {
			var env pb.Envelope
			if err := r.Read(&env); err != nil {
				return
			}
			if env.Body == nil {
				t.Fatal("accepted an envelope without body")
			}
		}
	})
}
