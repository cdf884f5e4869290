// Package source is where escrad's telemetry comes from: Escra §IV-B's
// per-period CPU record (quota, unused runtime, throttle flag) for every
// managed container, and the OOM events of the same groups, behind one
// small interface so the backends are interchangeable: kmod (escra.ko over
// generic netlink), bpf (a CO-RE program on stock kernels with BTF) and
// cgroupfs (cgroup files on any kernel). The record and its period
// numbering, shared by the backends that see the kernel's record, are here
// too.
package source

import (
	"context"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Source is where per-period CPU records and OOM events come from.
//
// A backend implements:
//   - Watch/Unwatch: start/stop telemetry and OOM trapping for a group the
//     daemon registered under handle h (the kernel backend sends
//     ESCRA_CMD_WATCH with the group's v2 id; cgroupfs opens files).
//   - Run: deliver until ctx ends. Each period, every watched group's record
//     goes to sink.CPU (the *CpuStat is only valid during the call; fill
//     Handle, PeriodSeq, QuotaUs, UnusedUs, Throttled, NrThrottled,
//     ThrottledUs, UsageUs; PeriodUs 0 = the daemon's period), then one
//     sink.Flush. OOM events go to sink.OOM from any goroutine; the tasks
//     that hit the limit wait until Resolve.
//   - Resolve: the verdict for an OOM event. granted means the daemon has
//     already raised the limit to newLimit; !granted means let the kernel's
//     OOM killer act. Resolve must be idempotent and cheap.
type Source interface {
	Backend() pb.Backend
	Watch(h uint32, g *cgroups.Group) error
	Unwatch(h uint32)
	Run(ctx context.Context, sink Sink) error
	Resolve(ev rescue.Event, granted bool, newLimit int64) error
}

// Sink receives what a Source produces.
type Sink interface {
	CPU(s *pb.CpuStat)
	Flush()
	OOM(ev rescue.Event)
}

// LimitFollower is a Source whose OOM trap depends on the memory limit:
// cgroupfs keeps memory.high (v2) or a usage threshold (v1) a margin below
// the limit. The
// agent calls MemoryLimitChanged after every memory-limit write it makes
// (SetLimits, grants, reclaim) and Maintain from its watchdog.
type LimitFollower interface {
	MemoryLimitChanged(h uint32, limit int64)
	Maintain(h uint32)
}
