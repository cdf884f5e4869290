package telemetry

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/internal/cgtest"
	"github.com/escra-dev/escra/daemon/oom"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

type recSink struct {
	mu      sync.Mutex
	stats   []*pb.CpuStat
	flushes int
}

func (r *recSink) CPU(s *pb.CpuStat) {
	r.mu.Lock()
	r.stats = append(r.stats, &pb.CpuStat{Handle: s.Handle, PeriodSeq: s.PeriodSeq, QuotaUs: s.QuotaUs, UnusedUs: s.UnusedUs,
		Throttled: s.Throttled, NrThrottled: s.NrThrottled, ThrottledUs: s.ThrottledUs, UsageUs: s.UsageUs, PeriodUs: s.PeriodUs})
	r.mu.Unlock()
}
func (r *recSink) Flush()        { r.mu.Lock(); r.flushes++; r.mu.Unlock() }
func (r *recSink) OOM(oom.Event) {}

// A busy group capped at 20 ms per 100 ms is throttled every period and
// leaves nothing unused; an idle one leaves its whole quota unused.
func TestCgroupfsRecordsBusyAndIdleGroups(t *testing.T) {
	busy := cgtest.New(t, "tel-busy")
	idle := cgtest.New(t, "tel-idle")
	spin := cgtest.Workload(t, "spin")
	for _, rel := range []string{busy, idle} {
		cgtest.Write(t, "cpu", rel, "cpu.cfs_period_us", "100000")
		cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "20000")
	}
	p, err := cgtest.Start(busy, spin, "-threads", "1", "-for", "20s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	src, err := NewCgroupfs(100*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	src.Limits = func(uint32) (int64, uint32) { return 20000, 100000 }
	for h, rel := range map[uint32]string{1: busy, 2: idle} {
		paths, err := cgroups.PathsForCgroup(rel)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cgroups.Open(paths)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		if err := src.Watch(h, g); err != nil {
			t.Fatal(err)
		}
	}
	sink := &recSink{}
	ctx, cancel := context.WithTimeout(context.Background(), 1300*time.Millisecond)
	defer cancel()
	if err := src.Run(ctx, sink); err != nil {
		t.Fatal(err)
	}
	var busyN, throttled, idleN int
	var busyUsage uint64
	for _, s := range sink.stats {
		switch s.Handle {
		case 1:
			busyN++
			busyUsage += s.UsageUs
			if s.Throttled {
				throttled++
			}
			if s.QuotaUs != 20000 {
				t.Errorf("busy quota %d", s.QuotaUs)
			}
		case 2:
			idleN++
			if s.Throttled || s.UnusedUs < 19000 || s.UsageUs > 1000 {
				t.Errorf("idle record %v", s)
			}
		}
	}
	if busyN < 8 || idleN < 8 || sink.flushes < 9 {
		t.Fatalf("%d busy, %d idle records, %d flushes in 1.3 s at 100 ms", busyN, idleN, sink.flushes)
	}
	if throttled < busyN/2 {
		t.Errorf("busy group throttled in %d of %d periods", throttled, busyN)
	}
	// Usage per period stays near the 20 ms quota (sampling phase jitter
	// moves a little between periods).
	if avg := busyUsage / uint64(busyN); avg < 12000 || avg > 28000 {
		t.Errorf("busy usage %d µs per period, want about 20000", avg)
	}
}

func TestUntilNextIsAligned(t *testing.T) {
	p := 100 * time.Millisecond
	now := time.Unix(0, 1_000_000_000+30_000_000)
	if d := untilNext(now, p); d != 70*time.Millisecond {
		t.Fatalf("got %v", d)
	}
	now = time.Unix(0, 1_000_000_000+99_000_000)
	if d := untilNext(now, p); d != 101*time.Millisecond {
		t.Fatalf("just before the edge: got %v, want the next one", d)
	}
}
