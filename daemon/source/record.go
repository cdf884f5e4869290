package source

// Kind says what a Record reports.
type Kind uint8

const (
	// KindPeriod: a CFS bandwidth period ended.
	KindPeriod Kind = iota
	// KindThrottle: a cfs_rq of the group was throttled inside the
	// period in progress (TimestampNs is when).
	KindThrottle
	// KindNear: the runtime left in the group's pool fell to the
	// near-throttle threshold inside the period in progress.
	KindNear
)

// Record is one CFS bandwidth period of one watched cgroup, taken by the
// scheduler hook before the refill (Escra §IV-B), or, when Kind is not
// KindPeriod, a throttle event inside a period: then only CgroupID,
// QuotaNs, PeriodNs, UsedNs (so far), NrThrottled and TimestampNs are set.
// An idle group's period timer stops, so idle periods produce no record:
// a gap in Seq or TimestampNs is a run of fully unused periods.
type Record struct {
	Kind        Kind
	CgroupID    uint64
	Seq         uint64 // per-cgroup period counter; advances by the periods elapsed
	QuotaNs     uint64
	PeriodNs    uint64
	UnusedNs    uint64 // runtime left in the group's pool at the period's end
	Throttled   bool   // throttled during the period
	NrThrottled uint32 // cumulative
	ThrottledNs uint64 // cumulative
	TimestampNs uint64 // kernel ktime at the period boundary
	// UsedNs, when HasUsed, is the CPU the group used in the period: the
	// scheduler's own count (the kernel backend, correct with CFS burst)
	// or measured by the reader (the bpf backend after a quota write);
	// else the usage is QuotaNs − UnusedNs.
	UsedNs  uint64
	HasUsed bool
}
