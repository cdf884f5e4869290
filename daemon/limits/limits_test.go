package limits

import (
	"strconv"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

func TestMemoryAndMemswOrderBothWays(t *testing.T) {
	rel := cgtest.New(t, "memsw")
	g := cgtest.Open(t, rel)
	if !g.Has(cgroups.MemswLimit) {
		t.Skip("no swap accounting (memory.memsw.*) on this kernel")
	}
	// Docker's default: memsw = memory (no swap allowance) or larger.
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(64<<20))
	cgtest.Write(t, "memory", rel, "memory.memsw.limit_in_bytes", strconv.Itoa(80<<20))
	e, err := NewEntry("x", false, g)
	if err != nil {
		t.Fatal(err)
	}
	a := New()
	a.Add(1, e)
	// Raising past the old memsw only works when memsw goes first.
	if err := a.Apply(1, 1, &pb.Limits{MemoryLimitBytes: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	if m, s := cgtest.Read(t, "memory", rel, "memory.limit_in_bytes"), cgtest.Read(t, "memory", rel, "memory.memsw.limit_in_bytes"); m != strconv.Itoa(256<<20) || s != strconv.Itoa(272<<20) {
		t.Fatalf("after raise: memory %s memsw %s; want 256 MiB and 272 MiB (swap allowance kept)", m, s)
	}
	// Lowering below the old memory only works when memory goes first.
	if err := a.Apply(1, 2, &pb.Limits{MemoryLimitBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	if m, s := cgtest.Read(t, "memory", rel, "memory.limit_in_bytes"), cgtest.Read(t, "memory", rel, "memory.memsw.limit_in_bytes"); m != strconv.Itoa(32<<20) || s != strconv.Itoa(48<<20) {
		t.Fatalf("after lower: memory %s memsw %s", m, s)
	}
}

func TestStaleGenerationNeverOverwrites(t *testing.T) {
	rel := cgtest.New(t, "gen")
	a := New()
	e, err := NewEntry("x", false, cgtest.Open(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	a.Add(7, e)
	if err := a.Apply(7, 10, &pb.Limits{CpuQuotaUs: 30000, CpuPeriodUs: 100000, CpusetCpus: "0"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(7, 9, &pb.Limits{CpuQuotaUs: 90000}); err != ErrStale {
		t.Fatalf("stale update: %v", err)
	}
	if q := cgtest.Read(t, "cpu", rel, "cpu.cfs_quota_us"); q != "30000" {
		t.Fatalf("quota %s, want 30000", q)
	}
	if c := cgtest.Read(t, "cpuset", rel, "cpuset.cpus"); c != "0" {
		t.Fatalf("cpuset %s", c)
	}
	if err := a.Apply(7, 11, &pb.Limits{CpuQuotaUs: -1}); err != nil {
		t.Fatal(err)
	}
	if q := cgtest.Read(t, "cpu", rel, "cpu.cfs_quota_us"); q != "-1" {
		t.Fatalf("unlimited quota %s", q)
	}
	if err := a.Apply(99, 1, &pb.Limits{CpuQuotaUs: 1000}); err != ErrUnknown {
		t.Fatalf("unknown handle: %v", err)
	}
}

func TestReclaimToUsagePlusMarginNeverBelowUsage(t *testing.T) {
	rel := cgtest.New(t, "reclaim")
	hog := cgtest.Workload(t, "memhog")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(256<<20))
	p, err := cgtest.Start(rel, hog, "-mib", "24", "-hold", "30s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	g := cgtest.Open(t, rel)
	// All of it touched: a hog still growing past usage + margin would make
	// the lowered limit fail (EBUSY) on a loaded machine.
	if err := p.WaitOutput("memhog: 24 MiB", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	e, err := NewEntry("x", false, g)
	if err != nil {
		t.Fatal(err)
	}
	a := New()
	a.Add(1, e)
	const margin = 8 << 20
	peak, _ := g.MemPeak() // the hog's steady 24 MiB plus what starting it took
	res := a.Reclaim(margin, nil)
	if len(res) != 1 {
		t.Fatalf("reclaimed %v", res)
	}
	r := res[0]
	lim, _ := strconv.ParseInt(cgtest.Read(t, "memory", rel, "memory.limit_in_bytes"), 10, 64)
	if lim != r.NewLimitBytes || r.OldLimitBytes != 256<<20 || r.ReclaimedBytes != uint64(256<<20-lim) {
		t.Fatalf("result %v, cgroup limit %d", r, lim)
	}
	if lim < int64(r.UsageBytes)+margin || lim > max(int64(r.UsageBytes), peak)+margin+1<<20 {
		t.Fatalf("new limit %d not max(usage %d, peak %d) + margin", lim, r.UsageBytes, peak)
	}
	// Already tight: a second pass changes nothing.
	if res := a.Reclaim(margin+(64<<20), nil); len(res) != 0 {
		t.Fatalf("second reclaim raised or changed limits: %v", res)
	}
	if _, err := p.Wait(100 * time.Millisecond); err == nil {
		t.Fatal("memhog died: reclaim must never push a limit below usage")
	}
}

// Reclaim keeps what the group used since the previous reclaim: 40 MiB
// held for a moment and freed, then 8 MiB held. The first reclaim leaves
// room for the 48 MiB peak; the second (the peak reset, nothing new)
// takes the limit to usage + margin.
func TestReclaimKeepsThePeakSinceThePreviousReclaim(t *testing.T) {
	rel := cgtest.New(t, "reclaim-peak")
	hog := cgtest.Workload(t, "memhog")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(256<<20))
	g := cgtest.Open(t, rel)
	if _, ok := g.MemPeak(); !ok {
		t.Skip("no resettable memory peak (cgroup v2 before Linux 6.12)")
	}
	steady, err := cgtest.Start(rel, hog, "-mib", "8", "-hold", "60s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(steady.Kill)
	if err := steady.WaitOutput("memhog: 8 MiB", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	burst, err := cgtest.Start(rel, hog, "-mib", "40", "-hold", "300ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(burst.Kill)
	if _, err := burst.Wait(10 * time.Second); err != nil {
		t.Fatalf("the 40 MiB hog did not finish: %v", err)
	}
	peak, _ := g.MemPeak()
	if peak < 44<<20 {
		t.Fatalf("peak %d MiB after 8 + 40 MiB hogs, want >= 44", peak>>20)
	}
	e, err := NewEntry("x", false, g)
	if err != nil {
		t.Fatal(err)
	}
	a := New()
	a.Add(1, e)
	const margin = 4 << 20
	res := a.Reclaim(margin, nil)
	if len(res) != 1 {
		t.Fatalf("first reclaim: %v", res)
	}
	if first := res[0]; first.NewLimitBytes < peak+margin-(1<<20) || int64(first.UsageBytes) > 30<<20 {
		t.Fatalf("first reclaim: limit %d MiB with usage %d MiB, want the %d MiB peak + margin kept",
			first.NewLimitBytes>>20, first.UsageBytes>>20, peak>>20)
	}
	res = a.Reclaim(margin, nil)
	if len(res) != 1 {
		t.Fatalf("second reclaim (peak reset): %v", res)
	}
	if second := res[0]; second.NewLimitBytes > int64(second.UsageBytes)+margin+(1<<20) {
		t.Errorf("second reclaim: limit %d MiB, want usage %d MiB + margin", second.NewLimitBytes>>20, second.UsageBytes>>20)
	}
	if _, err := steady.Wait(100 * time.Millisecond); err == nil {
		t.Fatal("the 8 MiB hog died: reclaim must never push a limit below usage")
	}
}

func TestBadValuesRefusedBeforeAnyWrite(t *testing.T) {
	rel := cgtest.New(t, "bad")
	a := New()
	e, err := NewEntry("x", false, cgtest.Open(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	a.Add(1, e)
	before := cgtest.Read(t, "memory", rel, "memory.limit_in_bytes")
	for _, l := range []*pb.Limits{{MemoryLimitBytes: -5}, {CpuQuotaUs: -7}, {CpuPeriodUs: 10}, {CpuQuotaUs: 500}} {
		if err := a.Apply(1, 0, l); err == nil {
			t.Errorf("%v accepted", l)
		}
	}
	if after := cgtest.Read(t, "memory", rel, "memory.limit_in_bytes"); after != before {
		t.Errorf("memory limit changed %s -> %s", before, after)
	}
	if err := a.Apply(1, 0, nil); err != nil {
		t.Errorf("empty update: %v", err)
	}
}

// The kernel refuses a quota below the group's CFS burst. With a burst
// share the burst follows every quota, down and up; with none, a burst
// someone else set is clamped so that a cut still lands.
func TestBurstFollowsTheQuotaBothWays(t *testing.T) {
	rel := cgtest.New(t, "burst")
	g := cgtest.Open(t, rel)
	if !g.Has(cgroups.CPUBurst) || g.Paths.Version != cgroups.V1 {
		t.Skip("no cgroup v1 cpu.cfs_burst_us on this host")
	}
	burst := func() string { return cgtest.Read(t, "cpu", rel, "cpu.cfs_burst_us") }
	quota := func() string { return cgtest.Read(t, "cpu", rel, "cpu.cfs_quota_us") }

	cgtest.Write(t, "cpu", rel, "cpu.cfs_period_us", "100000")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "60000")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_burst_us", "50000") // not escrad's
	e, err := NewEntry("x", false, g)
	if err != nil {
		t.Fatal(err)
	}
	a := New()
	a.Add(1, e)
	if err := a.Apply(1, 1, &pb.Limits{CpuQuotaUs: 20000}); err != nil {
		t.Fatalf("cut below a burst set by someone else: %v", err)
	}
	if quota() != "20000" || burst() != "20000" {
		t.Fatalf("quota %s burst %s; want 20000 and the burst clamped to it", quota(), burst())
	}
	if err := a.Apply(1, 2, &pb.Limits{CpuQuotaUs: 70000}); err != nil {
		t.Fatal(err)
	}
	if burst() != "20000" {
		t.Fatalf("burst %s after a raise without a burst share; want it left at 20000", burst())
	}

	rel2 := cgtest.New(t, "burst2")
	cgtest.Write(t, "cpu", rel2, "cpu.cfs_quota_us", "50000")
	e2, err := NewEntry("y", false, cgtest.Open(t, rel2))
	if err != nil {
		t.Fatal(err)
	}
	b := New()
	b.Burst = 0.5
	b.Add(2, e2)
	for i, c := range []struct {
		quota  int64
		period uint32
		want   string
	}{
		{80000, 0, "40000"},
		{10000, 0, "5000"},      // the burst goes down first
		{90000, 0, "45000"},     // and up after the quota
		{30000, 50000, "15000"}, // a new period with the quota
		{-1, 0, "15000"},        // unlimited: nothing to carry over
		{4000, 0, "2000"},
	} {
		if err := b.Apply(2, uint64(i+1), &pb.Limits{CpuQuotaUs: c.quota, CpuPeriodUs: c.period}); err != nil {
			t.Fatalf("quota %d: %v", c.quota, err)
		}
		if got := cgtest.Read(t, "cpu", rel2, "cpu.cfs_burst_us"); got != c.want {
			t.Fatalf("quota %d: burst %s, want %s", c.quota, got, c.want)
		}
		if cur, _ := e2.Current(); strconv.FormatInt(cur.CPUBurstUs, 10) != c.want {
			t.Fatalf("quota %d: believed burst %d, want %s", c.quota, cur.CPUBurstUs, c.want)
		}
	}
}
