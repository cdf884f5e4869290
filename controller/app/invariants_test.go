package app

import (
	"io"
	"log/slog"
	"testing"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
)

type counts struct{ bad map[string]int }

func (c *counts) Decision(string)       {}
func (c *counts) BadStat(reason string) { c.bad[reason]++ }
func (c *counts) ThrottleEvent(string)  {}
func (c *counts) Lease(string)          {}

// newTestApp starts an app of cores CPU and 1 GiB with params p, stopped
// when the test ends; its metrics count the refusals.
func newTestApp(t *testing.T, name string, cores float64, p allocator.Params) (*App, *counts) {
	t.Helper()
	c := &counts{bad: map[string]int{}}
	s, err := New(name, allocator.Budget{CPUCores: cores, MemoryBytes: 1 << 30}, p, nil, false,
		slog.New(slog.NewTextHandler(io.Discard, nil)), &events.Hub{}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, c
}

// The last check before a decision leaves: a quota under the floor (or
// under Ω/λ when Ω cannot give everyone the floor) is refused.
func TestDecisionBelowFloorRefused(t *testing.T) {
	p := allocator.DefaultParams()
	s, _ := newTestApp(t, "inv", 1, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.a.Join(allocator.Join{Key: 1, HostMaxUs: 400000}); err != nil {
		t.Fatal(err)
	}
	if err := s.checkInvariants(allocator.Decision{Key: 1, QuotaUs: p.CPUFloorUs - 1}); err == nil {
		t.Fatalf("quota %d below the %d floor accepted", p.CPUFloorUs-1, p.CPUFloorUs)
	}
	if err := s.checkInvariants(allocator.Decision{Key: 1, QuotaUs: p.CPUFloorUs}); err != nil {
		t.Fatal(err)
	}
	if err := s.checkInvariants(allocator.Decision{Key: 1, MemLimit: 1 << 20}); err != nil {
		t.Fatal(err)
	}
}

// A budget lowered below what members hold (allowed: memory is not cut by
// force) must stop every memory raise until reclaim brings Σ back under it.
func TestMemoryRaiseOverBudgetRefused(t *testing.T) {
	s, _ := newTestApp(t, "inv-mem", 1, allocator.DefaultParams())
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.a.Join(allocator.Join{Key: 1, HostMaxUs: 400000}); err != nil {
		t.Fatal(err)
	}
	if s.a.MemAllocated() <= 64<<20 {
		t.Fatalf("bootstrap assigned only %d B", s.a.MemAllocated())
	}
	if _, err := s.a.SetBudget(allocator.Budget{CPUCores: 1, MemoryBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := s.checkInvariants(allocator.Decision{Key: 1, MemLimit: 2 << 30}); err == nil {
		t.Fatalf("memory raise accepted with Σ %d B over a %d B budget", s.a.MemAllocated(), s.a.Budget().MemoryBytes)
	}
}

// Host-local leases: while a revoked lease is out, a quota below
// the floor and Σ quotas + Σ leases over a cut Ω are legitimate; once it
// is back, both are refused again.
func TestInvariantsWithLeaseRevocationInFlight(t *testing.T) {
	p := allocator.DefaultParams()
	s, _ := newTestApp(t, "inv-lease", 4, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := allocator.Key(1<<32 | 1)
	if _, err := s.a.Join(allocator.Join{Key: k, HostMaxUs: 100000}); err != nil {
		t.Fatal(err)
	}
	cmds := s.a.RebalanceLeases(0.5)
	if len(cmds) != 1 || cmds[0].AddUs <= 0 {
		t.Fatalf("grant %+v", cmds)
	}
	below := allocator.Decision{Key: k, QuotaUs: p.CPUFloorUs - 1}
	if err := s.checkInvariants(below); err == nil {
		t.Fatal("quota below the floor accepted with no revocation in flight")
	}
	if _, err := s.a.SetBudget(allocator.Budget{CPUCores: 1.5, MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if s.a.CPUAllocatedUs()+s.a.LeasedUs() <= s.a.OmegaUs() || !s.a.LeaseRevoking() {
		t.Fatalf("setup: Σ q %d + Σ L %d, Ω %d, revoking %v", s.a.CPUAllocatedUs(), s.a.LeasedUs(), s.a.OmegaUs(), s.a.LeaseRevoking())
	}
	if err := s.checkInvariants(allocator.Decision{Key: k, QuotaUs: s.a.Member(k).QuotaUs}); err != nil {
		t.Fatalf("decision refused while the revoke is in flight: %v", err)
	}
	if err := s.checkInvariants(below); err != nil {
		t.Fatalf("below-floor quota refused while the revoke is in flight: %v", err)
	}
	if _, err := s.a.LeaseReturn(1, cmds[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.checkInvariants(below); err == nil {
		t.Fatal("quota below the floor accepted after the return")
	}
}
