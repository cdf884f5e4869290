package agent

import (
	"github.com/escra-dev/escra/daemon/rescue"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// CPU implements source.Sink.
func (a *Agent) CPU(s *pb.CpuStat) {
	if s.MidPeriod {
		a.m.thrEvents.Inc()
		if a.leaseRaise(s.Handle) {
			return // a full step from the lease: the controller would raise again
		}
		a.noteThrottle(s.Handle, s.QuotaUs)
	} else {
		a.m.records.Inc()
	}
	a.link.CPU(s)
}

// Flush implements source.Sink.
func (a *Agent) Flush() { a.link.Flush() }

// OOM implements source.Sink: the episode is the rescue's.
func (a *Agent) OOM(ev rescue.Event) { a.rescue.OOM(ev) }
