// Package kmod is escrad's escra.ko backend: it speaks the escra generic
// netlink family that the module registers (kmod/escra_uapi.h). The
// plumbing is conn.go (dial, groups, telemetry socket), owner.go (the
// owner socket: watches, OOM requests and replies) and codec.go (attribute
// encoding); source.go is the Source built on them. This file holds the
// family's numbers; the header is the source of truth and abi_test.go
// checks that they agree.
package kmod

// Family and multicast group names.
const (
	FamilyName    = "escra"
	FamilyVersion = 2

	// GroupTelemetry carries every watched cgroup's records; joining it
	// needs CAP_SYS_ADMIN. OOM requests are unicast to the owner (Owner).
	GroupTelemetry = "telemetry"
)

// Commands (enum escra_cmd).
const (
	CmdUnspec     = 0
	CmdWatch      = 1
	CmdUnwatch    = 2
	CmdOOMReply   = 3
	CmdGetStats   = 4
	CmdTelemetry  = 5
	CmdOOMRequest = 6
	CmdMax        = 6
)

// Top-level attributes (enum escra_attr).
const (
	AttrUnspec     = 0
	AttrPad        = 1
	AttrCgroupID   = 2
	AttrRequestID  = 3
	AttrGranted    = 4
	AttrRecord     = 5
	AttrUsageBytes = 6
	AttrMaxBytes   = 7
	AttrNrPages    = 8
	AttrStats      = 9
	AttrMax        = 9
)

// Telemetry record attributes, nested in AttrRecord (enum escra_rec_attr).
const (
	RecUnspec      = 0
	RecPad         = 1
	RecCgroupID    = 2
	RecSeq         = 3
	RecQuotaNs     = 4
	RecPeriodNs    = 5
	RecUnusedNs    = 6
	RecThrottled   = 7
	RecNrThrottled = 8
	RecThrottledNs = 9
	RecTimestampNs = 10
	RecUsedNs      = 11 // runtime consumed in the period; correct with CFS burst
	RecKind        = 12 // u8, events only (enum escra_rec_kind)
	RecMax         = 12
)

// What a record reports (enum escra_rec_kind): the period's end, or a
// throttle or near-throttle inside the period in progress.
const (
	RecKindPeriod   = 0
	RecKindThrottle = 1
	RecKindNear     = 2
)

// Module counters, nested in AttrStats (enum escra_stat_attr).
const (
	StatUnspec          = 0
	StatPad             = 1
	StatWatched         = 2
	StatRecordsSent     = 3
	StatRecordsDropped  = 4
	StatOOMRequests     = 5
	StatOOMGranted      = 6
	StatOOMTimeouts     = 7
	StatHookNsTotal     = 8
	StatHookCalls       = 9
	StatWatchesReleased = 10
	StatOOMUnsent       = 11
	StatDrainNsTotal    = 12
	StatEvents          = 13
	StatMax             = 13
)
