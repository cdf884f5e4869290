package source

import (
	"github.com/escra-dev/escra/daemon/cgroups"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// SeqState numbers a group's period records the way the kernel backend
// does (idle periods are gaps); other backends that see the same record
// (daemon/source/bpf) use it so the controller cannot tell them apart.
type SeqState struct{ s seqState }

// Fill turns r into st (see seqState.fill).
func (w *SeqState) Fill(st *pb.CpuStat, r Record) { w.s.fill(st, r) }

// InProgress is the period_seq the period in progress will be reported
// with, for a throttle event sent before it ends.
func (w *SeqState) InProgress(nowNs, periodNs uint64) uint64 {
	if !w.s.started {
		return 0
	}
	step := uint64(1)
	if nowNs > w.s.lastTs && periodNs > 0 {
		// The last record ended period seq at lastTs; whole periods
		// since then were idle (no record) and are skipped too.
		step = (nowNs-w.s.lastTs)/periodNs + 1
	}
	return w.s.seq + step
}

// FillEvent turns a throttle or near event of group h into st: a
// mid-period stat for the period in progress, numbered as its record
// will be, as the cgroupfs watcher sends it.
func (w *SeqState) FillEvent(st *pb.CpuStat, h uint32, r Record) {
	st.Reset()
	st.Handle = h
	st.PeriodSeq = w.InProgress(r.TimestampNs, r.PeriodNs)
	st.QuotaUs = int64(r.QuotaNs / 1000)
	st.NrThrottled = uint64(r.NrThrottled)
	st.MidPeriod = true
}

// UsageProbe corrects the usage of a period record whose quota was
// written during the period. Both backends derive usage as quota −
// runtime left at the boundary, but a quota write refills the runtime
// (tg_set_cfs_bandwidth), so what ran before the write is lost: every
// period in which escrad raised a throttled group (the controller's
// answer to a throttle event) or applied a decision a few ms after the
// boundary, and the allocator would cut the group it had just raised
// (docs/kernel-bpf.md, "Usage after a quota write"). For such a period the
// usage is the group's CPU time since the previous record, read when the
// record is handled: usage may shift between neighbouring periods by
// that delay, none is lost. Other periods keep quota − runtime left,
// exact at the boundary.
type UsageProbe struct {
	G *cgroups.Group
	// The group's CPU time and quota at the previous record.
	usageNs, quotaNs uint64
	primed           bool
}

// Measure sets r.UsedNs when r's quota differs from the previous
// record's; buf is scratch for the read (512 bytes).
func (p *UsageProbe) Measure(r *Record, buf []byte) {
	if p.G == nil {
		return
	}
	u, err := p.G.UsageNs(buf)
	if err != nil {
		p.primed = false
		return
	}
	if p.primed && r.QuotaNs != p.quotaNs && u >= p.usageNs {
		r.UsedNs, r.HasUsed = u-p.usageNs, true
	}
	p.usageNs, p.quotaNs, p.primed = u, r.QuotaNs, true
}

// seqState turns the kernel's records into the daemon's period sequence.
// An idle group's period timer stops, so the kernel sends nothing for idle
// periods; the elapsed time since the previous record says how many
// periods passed, and the skipped sequence numbers are the idle (fully
// unused) periods — the same gaps the cgroupfs backend leaves.
type seqState struct {
	started     bool
	seq         uint64
	lastTs      uint64
	lastThrotNs uint64
}

func (w *seqState) fill(st *pb.CpuStat, r Record) {
	step := uint64(1)
	if w.started && r.TimestampNs > w.lastTs && r.PeriodNs > 0 {
		step = (r.TimestampNs - w.lastTs + r.PeriodNs/2) / r.PeriodNs
		if step == 0 {
			step = 1
		}
	}
	var throttledNs uint64
	if w.started {
		w.seq += step
		if r.ThrottledNs >= w.lastThrotNs {
			throttledNs = r.ThrottledNs - w.lastThrotNs
		}
	} else {
		w.seq, w.started = 0, true // the protocol counts from 0 at registration
	}
	w.lastTs, w.lastThrotNs = r.TimestampNs, r.ThrottledNs
	used := int64(r.QuotaNs) - int64(r.UnusedNs)
	if used < 0 {
		used = 0 // burst: more than the quota was left
	}
	unusedNs := r.UnusedNs
	if r.HasUsed {
		used = int64(min(r.UsedNs, 1<<62))
		if r.QuotaNs > 0 {
			unusedNs = uint64(max(int64(r.QuotaNs)-used, 0))
		}
	}
	st.Reset()
	st.PeriodSeq = w.seq
	st.QuotaUs = int64(r.QuotaNs / 1000)
	st.PeriodUs = uint32(r.PeriodNs / 1000)
	st.UnusedUs = int64(unusedNs / 1000)
	st.Throttled = r.Throttled
	st.NrThrottled = uint64(r.NrThrottled)
	st.ThrottledUs = throttledNs / 1000 // per period, as cpu.stat deltas
	st.UsageUs = uint64(used / 1000)
}
