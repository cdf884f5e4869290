package ingest

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// sameAsProto fails t unless the Decoder and proto.Unmarshal (Decode)
// agree on data: both reject it, or both give the same stats.
func sameAsProto(t *testing.T, d *Decoder, data []byte) {
	t.Helper()
	ws, wstats, wbad, werr := Decode(data, &pb.TelemetryBatch{}, nil)
	gs, gstats, gbad, gerr := d.Decode(data, nil)
	if (werr == nil) != (gerr == nil) || errors.Is(werr, wire.ErrDatagramTooLarge) != errors.Is(gerr, wire.ErrDatagramTooLarge) {
		t.Fatalf("data %x: error %v, proto.Unmarshal's %v", data, gerr, werr)
	}
	if werr != nil {
		return
	}
	if gs != ws || gbad != wbad || len(gstats) != len(wstats) || (len(wstats) > 0 && !reflect.DeepEqual(gstats, wstats)) {
		t.Fatalf("data %x:\n got session %d bad %d %+v\nwant session %d bad %d %+v", data, gs, gbad, gstats, ws, wbad, wstats)
	}
}

func randBatch(r *rand.Rand) *pb.TelemetryBatch {
	v := func() uint64 { // small, large and boundary values
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return r.Uint64N(200_000)
		case 2:
			return r.Uint64()
		}
		return 1_000_000_000 + r.Uint64N(3) - 1
	}
	b := &pb.TelemetryBatch{SessionId: uint32(v()), BatchSeq: v(), PeriodUs: uint32(r.Uint64N(1_100_000))}
	for range r.IntN(60) {
		b.Stats = append(b.Stats, &pb.CpuStat{Handle: uint32(v()), PeriodSeq: v(), QuotaUs: int64(v()) - int64(r.IntN(3)),
			PeriodUs: uint32(r.Uint64N(3) * 50_000), UnusedUs: int64(v()), Throttled: r.IntN(2) == 0, NrThrottled: v(),
			ThrottledUs: v(), UsageUs: v(), MidPeriod: r.IntN(5) == 0})
	}
	return b
}

// The decoder agrees with proto.Unmarshal on valid batches, on batches
// with unknown fields, repeated fields and fields of the wrong wire type,
// and on damaged ones.
func TestDecoderMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var d Decoder
	for i := range 20000 {
		data, _ := proto.Marshal(randBatch(r))
		switch i % 6 {
		case 1: // unknown fields and a wrong wire type for a known one
			data = protowire.AppendTag(data, protowire.Number(1+r.IntN(20)), protowire.Type(r.IntN(6)))
			data = append(data, byte(r.IntN(256)), byte(r.IntN(256)), 0, 0)
		case 2: // a stat with a repeated field, an unknown field and a group
			var st []byte
			st = protowire.AppendTag(st, 1, protowire.VarintType)
			st = protowire.AppendVarint(st, r.Uint64N(9))
			st = protowire.AppendTag(st, 6, protowire.VarintType)
			st = protowire.AppendVarint(st, r.Uint64N(3))
			st = protowire.AppendTag(st, 3, protowire.Fixed64Type)
			st = protowire.AppendFixed64(st, r.Uint64())
			st = protowire.AppendTag(st, 11, protowire.StartGroupType)
			st = protowire.AppendTag(st, 11, protowire.EndGroupType)
			st = protowire.AppendTag(st, 1, protowire.VarintType)
			st = protowire.AppendVarint(st, r.Uint64())
			data = protowire.AppendTag(data, 4, protowire.BytesType)
			data = protowire.AppendBytes(data, st)
		case 3: // damaged bytes
			for range 1 + r.IntN(4) {
				if len(data) > 0 {
					data[r.IntN(len(data))] = byte(r.IntN(256))
				}
			}
		case 4: // cut short
			if len(data) > 0 {
				data = data[:r.IntN(len(data))]
			}
		case 5: // random bytes
			data = make([]byte, r.IntN(64))
			for j := range data {
				data[j] = byte(r.IntN(256))
			}
		}
		sameAsProto(t, &d, data)
	}
	for _, data := range [][]byte{nil, {0x08, 0x01}, {0x08, 0x01, 0x22, 0x02, 0x08}, {0x0c}, {0x08, 0x01, 0x04}, make([]byte, 1401),
		{0x08, 0x01, 0x22, 0x01, 0x0c}, {0xf8, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x08, 0x01}, {0x08, 0x01, 0x0b, 0x0c}} {
		sameAsProto(t, &d, data)
	}
}

func FuzzDecoderMatchesProto(f *testing.F) {
	b, _ := proto.Marshal(&pb.TelemetryBatch{SessionId: 1, BatchSeq: 2, PeriodUs: 100000, Stats: []*pb.CpuStat{
		{Handle: 1, PeriodSeq: 9, QuotaUs: 50000, UnusedUs: 100, Throttled: true, NrThrottled: 3, ThrottledUs: 5, UsageUs: 49900}}})
	f.Add(b)
	f.Add([]byte{0x08, 0x01, 0x22, 0x02, 0x08})
	var d Decoder
	f.Fuzz(func(t *testing.T, data []byte) { sameAsProto(t, &d, data) })
}

// Decoding a datagram allocates nothing once the scratch has grown.
func TestDecoderAllocatesNothing(t *testing.T) {
	b := &pb.TelemetryBatch{SessionId: 7, BatchSeq: 1, PeriodUs: 100000}
	for i := range 65 {
		b.Stats = append(b.Stats, &pb.CpuStat{Handle: uint32(i + 1), PeriodSeq: 100, QuotaUs: 20000, UnusedUs: 5000, UsageUs: 15000})
	}
	data, _ := proto.Marshal(b)
	if len(data) > wire.MaxDatagramBytes {
		t.Fatalf("test datagram of %d bytes", len(data))
	}
	var d Decoder
	var out []Stat
	if n := testing.AllocsPerRun(100, func() { _, out, _, _ = d.Decode(data, out) }); n != 0 || len(out) != 65 {
		t.Fatalf("%v allocations per datagram, %d stats", n, len(out))
	}
}
