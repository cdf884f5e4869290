package kmod

import (
	"errors"
	"fmt"
	"github.com/escra-dev/escra/daemon/source"

	"github.com/mdlayher/netlink"
)

// OOMRequest is a charge blocked in try_charge_memcg waiting for a verdict.
type OOMRequest struct {
	ID         uint64
	CgroupID   uint64
	UsageBytes uint64
	MaxBytes   uint64
	NrPages    uint32
}

// Stats are the module's counters (ESCRA_CMD_GET_STATS).
type Stats struct {
	Watched        uint32
	RecordsSent    uint64
	RecordsDropped uint64
	OOMRequests    uint64
	OOMGranted     uint64
	OOMTimeouts    uint64
	HookNsTotal    uint64
	HookCalls      uint64
	// WatchesReleased counts watches dropped because their owner's socket
	// closed; OOMUnsent requests the owner's socket could not take.
	WatchesReleased uint64
	OOMUnsent       uint64
	// DrainNsTotal is the time the drain work spent batching and
	// multicasting records (local_clock(), kernel CPU outside the hook).
	DrainNsTotal uint64
	// Events counts throttle and near-throttle records queued (a
	// kernel with patch 4 of the series).
	Events uint64
}

// ErrMalformed marks a message from the kernel that does not follow the ABI.
var ErrMalformed = errors.New("genl: malformed escra message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// EncodeCgroup encodes the attributes of ESCRA_CMD_WATCH / ESCRA_CMD_UNWATCH.
func EncodeCgroup(cgroupID uint64) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint64(AttrCgroupID, cgroupID)
	return ae.Encode()
}

// EncodeOOMReply encodes the attributes of ESCRA_CMD_OOM_REPLY.
func EncodeOOMReply(requestID uint64, granted bool) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint64(AttrRequestID, requestID)
	var g uint8
	if granted {
		g = 1
	}
	ae.Uint8(AttrGranted, g)
	return ae.Encode()
}

// DecodeTelemetry decodes the attributes of an ESCRA_CMD_TELEMETRY message:
// a list of nested records. Unknown attributes are skipped (newer modules
// may add some); records missing a required field are an error.
func DecodeTelemetry(b []byte) ([]source.Record, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, malformed("telemetry: %v", err)
	}
	var recs []source.Record
	for ad.Next() {
		if ad.Type() != AttrRecord {
			continue
		}
		var r source.Record
		ad.Nested(func(nad *netlink.AttributeDecoder) error {
			return decodeRecord(nad, &r)
		})
		if ad.Err() != nil {
			break
		}
		recs = append(recs, r)
	}
	if err := ad.Err(); err != nil {
		return nil, malformed("telemetry: %v", err)
	}
	return recs, nil
}

// required record attributes, as a bit set of their types.
const requiredRec = 1<<RecCgroupID | 1<<RecQuotaNs | 1<<RecPeriodNs | 1<<RecUnusedNs | 1<<RecTimestampNs

func decodeRecord(ad *netlink.AttributeDecoder, r *source.Record) error {
	var seen uint32
	for ad.Next() {
		if t := ad.Type(); t <= RecMax {
			seen |= 1 << t
		}
		switch ad.Type() {
		case RecCgroupID:
			r.CgroupID = ad.Uint64()
		case RecSeq:
			r.Seq = ad.Uint64()
		case RecQuotaNs:
			r.QuotaNs = ad.Uint64()
		case RecPeriodNs:
			r.PeriodNs = ad.Uint64()
		case RecUnusedNs:
			r.UnusedNs = ad.Uint64()
		case RecThrottled:
			r.Throttled = ad.Uint8() != 0
		case RecNrThrottled:
			r.NrThrottled = ad.Uint32()
		case RecThrottledNs:
			r.ThrottledNs = ad.Uint64()
		case RecTimestampNs:
			r.TimestampNs = ad.Uint64()
		case RecKind:
			// The module's enum is source.Kind's; a kind a newer
			// module adds is passed on and ignored by the Source.
			r.Kind = source.Kind(ad.Uint8())
		case RecUsedNs:
			// The kernel's own count of the period's runtime: with
			// cpu.max.burst the pool can hold more than the quota,
			// so QuotaNs - UnusedNs would under-report.
			r.UsedNs, r.HasUsed = ad.Uint64(), true
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if seen&requiredRec != requiredRec {
		return errors.New("record lacks cgroup id, quota, period, unused or timestamp")
	}
	if r.PeriodNs == 0 {
		return errors.New("record with zero period")
	}
	return nil
}

// DecodeOOMRequest decodes the attributes of an ESCRA_CMD_OOM_REQUEST message.
func DecodeOOMRequest(b []byte) (OOMRequest, error) {
	var req OOMRequest
	var sawID, sawCgroup bool
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return req, malformed("oom request: %v", err)
	}
	for ad.Next() {
		switch ad.Type() {
		case AttrRequestID:
			req.ID, sawID = ad.Uint64(), true
		case AttrCgroupID:
			req.CgroupID, sawCgroup = ad.Uint64(), true
		case AttrUsageBytes:
			req.UsageBytes = ad.Uint64()
		case AttrMaxBytes:
			req.MaxBytes = ad.Uint64()
		case AttrNrPages:
			req.NrPages = ad.Uint32()
		}
	}
	if err := ad.Err(); err != nil {
		return OOMRequest{}, malformed("oom request: %v", err)
	}
	if !sawID || !sawCgroup {
		return OOMRequest{}, malformed("oom request lacks request id or cgroup id")
	}
	return req, nil
}

// DecodeStats decodes the attributes of an ESCRA_CMD_GET_STATS reply.
func DecodeStats(b []byte) (Stats, error) {
	var s Stats
	found := false
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return s, malformed("stats: %v", err)
	}
	for ad.Next() {
		if ad.Type() != AttrStats {
			continue
		}
		found = true
		ad.Nested(func(nad *netlink.AttributeDecoder) error {
			for nad.Next() {
				switch nad.Type() {
				case StatWatched:
					s.Watched = nad.Uint32()
				case StatRecordsSent:
					s.RecordsSent = nad.Uint64()
				case StatRecordsDropped:
					s.RecordsDropped = nad.Uint64()
				case StatOOMRequests:
					s.OOMRequests = nad.Uint64()
				case StatOOMGranted:
					s.OOMGranted = nad.Uint64()
				case StatOOMTimeouts:
					s.OOMTimeouts = nad.Uint64()
				case StatHookNsTotal:
					s.HookNsTotal = nad.Uint64()
				case StatWatchesReleased:
					s.WatchesReleased = nad.Uint64()
				case StatOOMUnsent:
					s.OOMUnsent = nad.Uint64()
				case StatHookCalls:
					s.HookCalls = nad.Uint64()
				case StatDrainNsTotal:
					s.DrainNsTotal = nad.Uint64()
				case StatEvents:
					s.Events = nad.Uint64()
				}
			}
			return nad.Err()
		})
	}
	if err := ad.Err(); err != nil {
		return Stats{}, malformed("stats: %v", err)
	}
	if !found {
		return Stats{}, malformed("stats reply lacks ESCRA_A_STATS")
	}
	return s, nil
}
