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
}

// State is an app's view for snapshots.
type State struct {
	Name                     string
	Auto                     bool
	Budget                   allocator.Budget
	Params                   allocator.Params
	Policy                   string
	OmegaUs, CPUAllocatedUs  int64
	CPULeasedUs              int64 // Σ outstanding host-local leases
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
			OmegaUs: s.a.OmegaUs(), CPUAllocatedUs: s.a.CPUAllocatedUs(), CPULeasedUs: s.a.LeasedUs(), MemAllocated: s.a.MemAllocated(),
			MemUnalloc: s.a.MemUnallocated(), PendingOOMs: len(s.oomQueue), Reclaiming: s.reclaiming}
		st.CPUHeldUs, st.MemHeld = s.a.Held()
		for _, m := range s.a.Members() {
			mi := s.members[m.Key]
			if mi == nil {
				continue
			}
			st.Members = append(st.Members, MemberState{Info: mi.MemberInfo, QuotaUs: m.QuotaUs, MemLimit: m.MemLimit,
				MemUsage: m.MemUsage, LastUsageUs: m.LastUsageUs, Gen: m.Gen, Periods: m.Periods, Throttles: m.Throttles,
				ThrottleEvents: m.ThrottleEvents, OOMRequests: m.OOMRequests, OOMGrants: m.OOMGrants, OOMDenies: m.OOMDenies})
		}
	})
	return st
}
