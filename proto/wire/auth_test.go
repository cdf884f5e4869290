package wire

import (
	"testing"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

func TestReplayWindow(t *testing.T) {
	var w ReplayWindow
	for _, c := range []struct {
		seq  uint64
		want bool
	}{{0, false}, {1, true}, {1, false}, {3, true}, {2, true}, {2, false}, {100, true}, {36, false},
		{37, true}, {37, false}, {99, true}, {1000, true}, {100, false}, {999, true}, {1 << 63, true}, {1000, false}} {
		if got := w.Accept(c.seq); got != c.want {
			t.Fatalf("Accept(%d) = %v, want %v", c.seq, got, c.want)
		}
	}
}

func TestMACBatchesStayUnder1400AndVerify(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	b := Batcher{SessionID: 7, PeriodUs: 100000, MAC: NewDatagramMAC(key)}
	rx := NewDatagramMAC(key)
	var n, stats int
	emit := func(d []byte) error {
		if len(d) > MaxDatagramBytes {
			t.Fatalf("datagram of %d bytes", len(d))
		}
		msg, ok := rx.Open(d)
		if !ok {
			t.Fatal("genuine datagram failed to verify")
		}
		var tb pb.TelemetryBatch
		if err := DecodeBatch(msg, &tb); err != nil {
			t.Fatal(err)
		}
		stats += len(tb.Stats)
		d[len(d)/2] ^= 1 // one flipped bit anywhere fails
		if _, ok := rx.Open(d); ok {
			t.Fatal("tampered datagram verified")
		}
		n++
		return nil
	}
	for i := range 1000 {
		s := &pb.CpuStat{Handle: uint32(i), PeriodSeq: 1 << 40, QuotaUs: 1 << 30, UnusedUs: 1 << 29, Throttled: true,
			NrThrottled: 1 << 40, ThrottledUs: 1 << 30, UsageUs: 1 << 30}
		if err := b.Add(s, emit); err != nil {
			t.Fatal(err)
		}
	}
	b.Flush(emit)
	if stats != 1000 || n < 2 {
		t.Fatalf("%d stats in %d datagrams", stats, n)
	}
	if _, ok := NewDatagramMAC([]byte("other key")).Open(make([]byte, 40)); ok {
		t.Fatal("zero datagram verified")
	}
}

// Nothing but a datagram sealed with the key opens, and Open never panics
// on short or garbage input.
func FuzzOpenDatagram(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	sealed := NewDatagramMAC(key).Seal([]byte{0x08, 0x07, 0x10, 0x01})
	f.Add(sealed)
	f.Add([]byte{})
	f.Add(make([]byte, TagBytes))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewDatagramMAC(key)
		msg, ok := m.Open(data)
		if !ok {
			return
		}
		if again := NewDatagramMAC(key).Seal(append([]byte(nil), msg...)); string(again) != string(data) {
			t.Fatal("opened a datagram that is not msg || tag(msg)")
		}
		var w ReplayWindow
		if !w.Accept(uint64(len(data))+1) || w.Accept(uint64(len(data))+1) {
			t.Fatal("replay window accepted a sequence twice")
		}
	})
}

func BenchmarkSealOpen1400(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	tx, rx := NewDatagramMAC(key), NewDatagramMAC(key)
	msg := make([]byte, MaxDatagramBytes-TagBytes, MaxDatagramBytes)
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		d := tx.Seal(msg)
		if _, ok := rx.Open(d); !ok {
			b.Fatal("no")
		}
	}
}
