package app

import "github.com/escra-dev/escra/controller/allocator"

// MemberState is a member's view for snapshots.
type MemberState struct {
	Info                               MemberInfo
	QuotaUs, MemLimit, MemUsage        int64
	LastUsageUs                        int64
	Gen                                uint64
	Periods, Throttles, ThrottleEvents uint64
	OOMRequests, OOMGrants, OOMDenies  uint64
	// In recommend mode QuotaUs and MemLimit are what the cgroup holds
	// and these what the allocator would set (0 otherwise).
	RecQuotaUs, RecMem int64
	// The member's caps (0: none).
	MaxQuotaUs, MaxMem int64
}

// State is an app's view for snapshots.
type State struct {
	Name                     string
	Auto                     bool
	Budget                   allocator.Budget
	Params                   allocator.Params
	Policy                   string
	Recommend                bool // recommend mode (mode.go)
	OmegaUs, CPUAllocatedUs  int64
	CPULeasedUs              int64 // Σ outstanding host-local leases
	MemCredited              int64 // Σ outstanding host-local memory credit
	CPUHeldUs, MemHeld       int64 // Σ shares held for members of dead hosts
	MemAllocated, MemUnalloc int64
	Members                  []MemberState
	PendingOOMs, Reclaiming  int
}

// Snapshot reads the app's state on its goroutine.
func (s *App) Snapshot() State {
	var st State
	s.call(func() {
		st = State{Name: s.Name, Auto: s.auto, Budget: s.a.Budget(), Params: s.a.P, Policy: s.a.Policy.Name(),
			OmegaUs: s.a.OmegaUs(), CPUAllocatedUs: s.a.CPUAllocatedUs(), CPULeasedUs: s.a.LeasedUs(), MemCredited: s.a.MemCredited(), MemAllocated: s.a.MemAllocated(),
			MemUnalloc: s.a.MemUnallocated(), PendingOOMs: len(s.oomQueue), Reclaiming: s.reclaiming, Recommend: s.recommend}
		st.CPUHeldUs, st.MemHeld = s.a.Held()
		for _, m := range s.a.Members() {
			mi := s.members[m.Key]
			if mi == nil {
				continue
			}
			ms := MemberState{Info: mi.MemberInfo, QuotaUs: m.QuotaUs, MemLimit: m.MemLimit,
				MemUsage: m.MemUsage, LastUsageUs: m.LastUsageUs, Gen: m.Gen, Periods: m.Periods, Throttles: m.Throttles,
				ThrottleEvents: m.ThrottleEvents, OOMRequests: m.OOMRequests, OOMGrants: m.OOMGrants, OOMDenies: m.OOMDenies,
				MaxQuotaUs: m.MaxQuotaUs, MaxMem: m.MaxMem}
			if s.recommend {
				ms.RecQuotaUs, ms.RecMem = m.QuotaUs, m.MemLimit
				ms.QuotaUs, ms.MemLimit = m.Applied()
			}
			st.Members = append(st.Members, ms)
		}
	})
	return st
}
