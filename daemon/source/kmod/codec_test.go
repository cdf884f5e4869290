package kmod

import (
	"errors"
	"testing"

	"github.com/mdlayher/netlink"

	"github.com/escra-dev/escra/daemon/source"
)

// kernelRecord encodes a record the way escra.ko's escra_put_rec does,
// optionally with a pad attribute (nla_put_u64_64bit on strict-alignment
// architectures) and an attribute type from a newer module.
func kernelRecord(ae *netlink.AttributeEncoder, r source.Record, pad, extra bool) {
	ae.Nested(AttrRecord, func(n *netlink.AttributeEncoder) error {
		if pad {
			n.Bytes(RecPad, nil)
		}
		n.Uint64(RecCgroupID, r.CgroupID)
		n.Uint64(RecSeq, r.Seq)
		n.Uint64(RecQuotaNs, r.QuotaNs)
		n.Uint64(RecPeriodNs, r.PeriodNs)
		n.Uint64(RecUnusedNs, r.UnusedNs)
		var t uint8
		if r.Throttled {
			t = 1
		}
		n.Uint8(RecThrottled, t)
		n.Uint32(RecNrThrottled, r.NrThrottled)
		n.Uint64(RecThrottledNs, r.ThrottledNs)
		n.Uint64(RecTimestampNs, r.TimestampNs)
		if r.HasUsed {
			n.Uint64(RecUsedNs, r.UsedNs)
		}
		if r.Kind != source.KindPeriod {
			n.Uint8(RecKind, uint8(r.Kind))
		}
		if extra {
			n.Uint32(RecMax+1, 7)
		}
		return nil
	})
}

func TestDecodeTelemetryBatch(t *testing.T) {
	want := []source.Record{
		{CgroupID: 42, Seq: 1, QuotaNs: 20e6, PeriodNs: 100e6, UnusedNs: 0, Throttled: true, NrThrottled: 3, ThrottledNs: 240e6, TimestampNs: 5e9},
		{CgroupID: 43, Seq: 9, QuotaNs: 50e6, PeriodNs: 100e6, UnusedNs: 12345, TimestampNs: 5e9 + 1},
		// CFS burst: the pool carried 30 ms over a 50 ms quota; the group
		// ran 40 ms. Only the kernel's own count says so.
		{CgroupID: 44, Seq: 2, QuotaNs: 50e6, PeriodNs: 100e6, UnusedNs: 60e6, TimestampNs: 5e9 + 2, UsedNs: 40e6, HasUsed: true},
		// Events inside the period after seq 2: a near-throttle, then the
		// throttle itself, each with the runtime used so far.
		{Kind: source.KindNear, CgroupID: 44, Seq: 2, QuotaNs: 50e6, PeriodNs: 100e6, TimestampNs: 5e9 + 40e6, UsedNs: 48e6, HasUsed: true},
		{Kind: source.KindThrottle, CgroupID: 44, Seq: 2, QuotaNs: 50e6, PeriodNs: 100e6, Throttled: true, NrThrottled: 1, TimestampNs: 5e9 + 41e6, UsedNs: 50e6, HasUsed: true},
		// A kind from a newer module is passed on for the Source to skip.
		{Kind: 9, CgroupID: 44, QuotaNs: 50e6, PeriodNs: 100e6, TimestampNs: 5e9 + 42e6},
	}
	ae := netlink.NewAttributeEncoder()
	kernelRecord(ae, want[0], false, false)
	kernelRecord(ae, want[1], true, true)
	for _, r := range want[2:] {
		kernelRecord(ae, r, false, false)
	}
	ae.Uint32(AttrMax+1, 1) // unknown top-level attribute: skipped
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTelemetry(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestDecodeTelemetryRejects(t *testing.T) {
	cases := map[string]func(ae *netlink.AttributeEncoder){
		"missing unused": func(ae *netlink.AttributeEncoder) {
			ae.Nested(AttrRecord, func(n *netlink.AttributeEncoder) error {
				n.Uint64(RecCgroupID, 1)
				n.Uint64(RecQuotaNs, 1)
				n.Uint64(RecPeriodNs, 1)
				n.Uint64(RecTimestampNs, 1)
				return nil
			})
		},
		"u32 where u64 belongs": func(ae *netlink.AttributeEncoder) {
			ae.Nested(AttrRecord, func(n *netlink.AttributeEncoder) error {
				n.Uint32(RecCgroupID, 1)
				return nil
			})
		},
		"zero period": func(ae *netlink.AttributeEncoder) {
			kernelRecord(ae, source.Record{CgroupID: 1, QuotaNs: 1}, false, false)
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			ae := netlink.NewAttributeEncoder()
			build(ae)
			b, err := ae.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeTelemetry(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := DecodeTelemetry([]byte{1, 2, 3}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: got %v, want ErrMalformed", err)
	}
}

func TestDecodeOOMRequest(t *testing.T) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint64(AttrRequestID, 7)
	ae.Uint64(AttrCgroupID, 99)
	ae.Uint64(AttrUsageBytes, 64<<20)
	ae.Uint64(AttrMaxBytes, 64<<20)
	ae.Uint32(AttrNrPages, 1)
	b, _ := ae.Encode()
	got, err := DecodeOOMRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := OOMRequest{ID: 7, CgroupID: 99, UsageBytes: 64 << 20, MaxBytes: 64 << 20, NrPages: 1}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}

	ae = netlink.NewAttributeEncoder()
	ae.Uint64(AttrCgroupID, 99)
	b, _ = ae.Encode()
	if _, err := DecodeOOMRequest(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("request without id: got %v, want ErrMalformed", err)
	}
}

func TestEncodeRequests(t *testing.T) {
	b, err := EncodeOOMReply(5, true)
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := netlink.UnmarshalAttributes(b)
	if err != nil {
		t.Fatal(err)
	}
	// The module's policy wants exactly a u64 id and a u8 verdict (0 or 1).
	if len(attrs) != 2 || attrs[0].Type != AttrRequestID || len(attrs[0].Data) != 8 ||
		attrs[1].Type != AttrGranted || len(attrs[1].Data) != 1 || attrs[1].Data[0] != 1 {
		t.Fatalf("oom reply attributes: %+v", attrs)
	}
	b, _ = EncodeOOMReply(5, false)
	attrs, _ = netlink.UnmarshalAttributes(b)
	if attrs[1].Data[0] != 0 {
		t.Fatalf("denial encodes granted=%d", attrs[1].Data[0])
	}
	b, _ = EncodeCgroup(1 << 40)
	attrs, _ = netlink.UnmarshalAttributes(b)
	if len(attrs) != 1 || attrs[0].Type != AttrCgroupID || len(attrs[0].Data) != 8 {
		t.Fatalf("watch attributes: %+v", attrs)
	}
}

// The module's record kinds are source.Kind's values: the codec passes
// the byte through.
func TestRecordKindsMatchSource(t *testing.T) {
	if RecKindPeriod != int(source.KindPeriod) || RecKindThrottle != int(source.KindThrottle) || RecKindNear != int(source.KindNear) {
		t.Fatalf("escra_rec_kind %d/%d/%d, source.Kind %d/%d/%d", RecKindPeriod, RecKindThrottle, RecKindNear,
			source.KindPeriod, source.KindThrottle, source.KindNear)
	}
}

func TestDecodeStats(t *testing.T) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(AttrStats, func(n *netlink.AttributeEncoder) error {
		n.Uint32(StatWatched, 3)
		n.Uint64(StatRecordsSent, 1000)
		n.Uint64(StatRecordsDropped, 2)
		n.Uint64(StatOOMRequests, 5)
		n.Uint64(StatOOMGranted, 4)
		n.Uint64(StatOOMTimeouts, 1)
		n.Uint64(StatHookNsTotal, 123456)
		n.Uint64(StatHookCalls, 1002)
		n.Uint64(StatDrainNsTotal, 7890)
		n.Uint64(StatEvents, 17)
		return nil
	})
	b, _ := ae.Encode()
	got, err := DecodeStats(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Watched: 3, RecordsSent: 1000, RecordsDropped: 2, OOMRequests: 5, OOMGranted: 4, OOMTimeouts: 1, HookNsTotal: 123456, HookCalls: 1002, DrainNsTotal: 7890, Events: 17}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := DecodeStats(nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty stats: got %v, want ErrMalformed", err)
	}
}

func FuzzDecodeTelemetry(f *testing.F) {
	ae := netlink.NewAttributeEncoder()
	kernelRecord(ae, source.Record{CgroupID: 1, QuotaNs: 2, PeriodNs: 3, TimestampNs: 4}, true, true)
	b, _ := ae.Encode()
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := DecodeTelemetry(b)
		if err != nil && recs != nil {
			t.Fatal("records returned with an error")
		}
		for _, r := range recs {
			if r.PeriodNs == 0 {
				t.Fatal("accepted a record with zero period")
			}
		}
	})
}

func FuzzDecodeOOMRequest(f *testing.F) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint64(AttrRequestID, 7)
	ae.Uint64(AttrCgroupID, 99)
	ae.Uint32(AttrNrPages, 1)
	b, _ := ae.Encode()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeOOMRequest(b)
		if err != nil && req != (OOMRequest{}) {
			t.Fatal("partial request returned with an error")
		}
	})
}

func FuzzDecodeStats(f *testing.F) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(AttrStats, func(n *netlink.AttributeEncoder) error {
		n.Uint32(StatWatched, 1)
		return nil
	})
	b, _ := ae.Encode()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeStats(b)
	})
}
