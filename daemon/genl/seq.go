package genl

import pb "github.com/escra-dev/escra/proto/escrapb"

// SeqState numbers a group's period records the way the kernel backend
// does (idle periods are gaps); other backends that see the same record
// (daemon/bpf) use it so the controller cannot tell them apart.
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
		// Idle periods since the last record are skipped too.
		step = max((nowNs-w.s.lastTs)/periodNs, 1)
	}
	return w.s.seq + step
}
