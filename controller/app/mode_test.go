package app

import (
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/proto/escrapb"
)

// modeHost records everything that would reach a daemon, beyond limits:
// reclaim requests and OOM verdicts.
type modeHost struct {
	recHost
	vmu      sync.Mutex
	reclaims int
	verdicts []*escrapb.OomVerdict
}

func (h *modeHost) Reclaim(hs []uint32, _ uint64, cb func(*escrapb.ReclaimResult, error)) {
	h.vmu.Lock()
	h.reclaims++
	h.vmu.Unlock()
	go cb(&escrapb.ReclaimResult{}, nil) // a session answers from its reader
}

func (h *modeHost) Verdict(_ uint64, v *escrapb.OomVerdict, _ time.Time) {
	h.vmu.Lock()
	h.verdicts = append(h.verdicts, v)
	h.vmu.Unlock()
}

// In recommend mode nothing reaches the daemons (no limit, no reclaim,
// no grant) while the recommendations follow the load; the caps hold in
// both modes; one Configure to enforce sends the recommendations.
func TestRecommendThenEnforce(t *testing.T) {
	s, _ := newTestApp(t, "rec", 2, allocator.DefaultParams())
	caps := func(name string) Caps {
		if name == "rec-busy" {
			return Caps{CPUCores: 1.2, MemoryBytes: 300 << 20}
		}
		return Caps{}
	}
	s.Configure(true, caps)
	h := &modeHost{}
	kb, ki := allocator.Key(1)<<32|1, allocator.Key(1)<<32|2
	// Both run with Docker's defaults: no quota (the whole 4-core host),
	// no memory limit.
	for _, mi := range []MemberInfo{
		{Key: kb, Host: h, HostID: "h", Handle: 1, Name: "rec-busy", HostMaxUs: 400000, CurQuotaUs: 400000},
		{Key: ki, Host: h, HostID: "h", Handle: 2, Name: "rec-idle", HostMaxUs: 400000, CurQuotaUs: 400000},
	} {
		if err := s.Join(mi); err != nil {
			t.Fatal(err)
		}
	}
	for seq := range uint64(40) {
		s.CPUStat(kb, ingest.Stat{Handle: 1, Stat: allocator.Stat{Seq: seq, QuotaUs: -1, PeriodUs: 100000, UsageUs: 250000}}, 0)
		s.CPUStat(ki, ingest.Stat{Handle: 2, Stat: allocator.Stat{Seq: seq, QuotaUs: -1, PeriodUs: 100000, UsageUs: 2000}}, 0)
		s.ThrottleEvent(kb, seq+1, 0)
	}
	s.Usage(kb, 280<<20)
	s.Usage(ki, 10<<20)
	s.PeriodicReclaim()
	s.OOM(kb, 7, &escrapb.OomRequest{Handle: 1, UsageBytes: 290 << 20, LimitBytes: 290 << 20, PagesWanted: 1}, time.Now())
	st := s.Snapshot()
	if p, q := h.take(); len(p)+len(q) != 0 {
		t.Fatalf("recommend mode sent limits: pushed %+v queued %+v", p, q)
	}
	h.vmu.Lock()
	if h.reclaims != 0 || len(h.verdicts) != 1 || h.verdicts[0].Granted {
		t.Fatalf("reclaims %d verdicts %+v: want none and one denial", h.reclaims, h.verdicts)
	}
	h.vmu.Unlock()
	if !st.Recommend || len(st.Members) != 2 {
		t.Fatalf("snapshot %+v", st)
	}
	busy, idle := st.Members[0], st.Members[1]
	if busy.QuotaUs != 400000 || idle.QuotaUs != 400000 {
		t.Fatalf("applied quotas %d %d: want the cgroups' own", busy.QuotaUs, idle.QuotaUs)
	}
	// Busy wants 2.5 cores: recommended its cap; idle shrinks to near its use.
	if busy.RecQuotaUs != 120000 || busy.MaxQuotaUs != 120000 || idle.RecQuotaUs > 10000 {
		t.Fatalf("recommended busy %d (max %d), idle %d", busy.RecQuotaUs, busy.MaxQuotaUs, idle.RecQuotaUs)
	}
	if busy.RecMem != 300<<20 || idle.RecMem != 10<<20+allocator.DefaultParams().SafeMarginBytes {
		t.Fatalf("recommended memory busy %d idle %d", busy.RecMem, idle.RecMem)
	}
	if busy.OOMRequests != 1 || busy.OOMDenies != 1 {
		t.Fatalf("OOM counters %d/%d", busy.OOMRequests, busy.OOMDenies)
	}

	s.Configure(false, caps)
	p, _ := h.take()
	got := map[uint32]int64{}
	for _, u := range p {
		got[u.Handle] = u.QuotaUs
	}
	if len(p) != 2 || got[1] != 120000 || got[2] != idle.RecQuotaUs {
		t.Fatalf("enforce sent %+v: want each recommendation", p)
	}
	st = s.Snapshot()
	if st.Recommend || st.Members[0].QuotaUs != 120000 || st.Members[0].RecQuotaUs != 0 {
		t.Fatalf("after enforce: %+v", st.Members[0])
	}
	// Enforcing, the period's decisions go out again.
	for seq := uint64(40); seq < 60; seq++ {
		s.CPUStat(ki, ingest.Stat{Handle: 2, Stat: allocator.Stat{Seq: seq, QuotaUs: idle.RecQuotaUs, PeriodUs: 100000, UsageUs: idle.RecQuotaUs, Throttled: true}}, 0)
	}
	if _, q := h.take(); len(q) == 0 {
		t.Fatal("no decision sent once enforcing")
	}
}

// New caps reach members that joined already.
func TestConfigureCapsRunningMember(t *testing.T) {
	s, _ := newTestApp(t, "cap", 2, allocator.DefaultParams())
	h := &modeHost{}
	k := allocator.Key(1)<<32 | 1
	if err := s.Join(MemberInfo{Key: k, Host: h, HostID: "h", Handle: 1, Name: "cap-web-2", HostMaxUs: 400000}); err != nil {
		t.Fatal(err)
	}
	h.take()
	s.Configure(false, func(name string) Caps {
		if name == "cap-web-2" {
			return Caps{CPUCores: 0.5}
		}
		return Caps{}
	})
	p, _ := h.take()
	if len(p) != 1 || p[0].QuotaUs != 50000 {
		t.Fatalf("pushed %+v: want the quota cut to the 0.5-core cap", p)
	}
}
