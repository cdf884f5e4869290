package ingest

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/proto/wire"
)

// Decoder parses TelemetryBatch datagrams with protowire straight into
// Stats, keeping its scratch between datagrams: proto.Unmarshal makes one
// CpuStat per stat, which was most of the controller's allocations
// (about 70 stats a datagram, every period from every host). It accepts
// and rejects exactly what wire.DecodeBatch does (decode_test.go).
type Decoder struct {
	raw []rawStat
}

// batchHead is what a TelemetryBatch says besides its stats.
type batchHead struct {
	session  uint32
	batchSeq uint64
	periodUs uint32
}

// rawStat is a CpuStat's fields as on the wire.
type rawStat struct {
	handle    uint32
	seq       uint64
	quota     int64
	period    uint32
	unused    int64
	throttled bool
	usage     uint64
	mid       bool
}

var (
	errDecode    = errors.New("wire: bad telemetry batch: cannot parse invalid wire-format data")
	errNoSession = errors.New("wire: telemetry batch without session id")
)

// Decode parses a datagram into out (reused), as the package's Decode.
func (d *Decoder) Decode(data []byte, out []Stat) (session uint32, stats []Stat, bad int, err error) {
	h, err := d.parse(data)
	if err != nil {
		return 0, out[:0], 0, err
	}
	stats, bad = d.convert(h, out)
	return h.session, stats, bad, nil
}

// parse reads the datagram's head and raw stats (d.raw).
func (d *Decoder) parse(data []byte) (batchHead, error) {
	var h batchHead
	d.raw = d.raw[:0]
	if len(data) > wire.MaxDatagramBytes {
		return h, wire.ErrDatagramTooLarge
	}
	for len(data) > 0 {
		num, typ, n := consumeTag(data)
		if n < 0 {
			return h, errDecode
		}
		data = data[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return h, errDecode
			}
			h.session, data = uint32(v), data[n:]
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return h, errDecode
			}
			h.batchSeq, data = v, data[n:]
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return h, errDecode
			}
			h.periodUs, data = uint32(v), data[n:]
		case num == 4 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return h, errDecode
			}
			s, err := parseStat(v)
			if err != nil {
				return h, err
			}
			d.raw, data = append(d.raw, s), data[n:]
		default: // unknown, or a known field with another wire type
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return h, errDecode
			}
			data = data[n:]
		}
	}
	if h.session == 0 {
		return h, errNoSession
	}
	return h, nil
}

// consumeTag reads a field's tag as proto.Unmarshal does: a number out of
// range or an end-group tag outside a group fails.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	v, n := protowire.ConsumeVarint(b)
	if n < 0 || v>>3 < uint64(protowire.MinValidNumber) || v>>3 > uint64(protowire.MaxValidNumber) {
		return 0, 0, -1
	}
	typ := protowire.Type(v & 7)
	if typ == protowire.EndGroupType {
		return 0, 0, -1
	}
	return protowire.Number(v >> 3), typ, n
}

func parseStat(b []byte) (rawStat, error) {
	var s rawStat
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return s, errDecode
		}
		b = b[n:]
		if typ != protowire.VarintType || num < 1 || num > 10 || num == 7 || num == 8 {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return s, errDecode
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return s, errDecode
		}
		b = b[n:]
		switch num {
		case 1:
			s.handle = uint32(v)
		case 2:
			s.seq = v
		case 3:
			s.quota = int64(v)
		case 4:
			s.period = uint32(v)
		case 5:
			s.unused = int64(v)
		case 6:
			s.throttled = v != 0
		case 9:
			s.usage = v
		case 10:
			s.mid = v != 0
		}
	}
	return s, nil
}

// convert resolves and checks the raw stats, as the package's convert.
func (d *Decoder) convert(h batchHead, out []Stat) (stats []Stat, bad int) {
	out = out[:0]
	for _, s := range d.raw {
		p := s.period
		if p == 0 {
			p = h.periodUs
		}
		if p == 0 || p > 1_000_000 || s.unused < 0 || s.quota < -1 ||
			s.unused > 1_000_000_000 || s.quota > 1_000_000_000 || s.usage > 1<<40 {
			bad++
			continue
		}
		out = append(out, Stat{Handle: s.handle, MidPeriod: s.mid, Stat: allocator.Stat{
			Seq: s.seq, QuotaUs: s.quota, PeriodUs: int64(p),
			UnusedUs: s.unused, Throttled: s.throttled, UsageUs: int64(s.usage),
		}})
	}
	return out, bad
}
