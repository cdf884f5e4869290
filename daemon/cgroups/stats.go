package cgroups

import (
	"errors"
	"fmt"
	"time"

	cg1 "github.com/containerd/cgroups/v3/cgroup1"
	cg2 "github.com/containerd/cgroups/v3/cgroup2"
)

// Stats are a group's cumulative CPU counters and memory gauges in base
// units, for Prometheus (rate() over the counters); read through
// containerd/cgroups/v3 at scrape time, off the hot path.
type Stats struct {
	CPUUsage         time.Duration // cpuacct.usage (v1), usage_usec (v2)
	CPUThrottled     time.Duration // cpu.stat throttled_time (v1, ns), throttled_usec (v2)
	Periods          uint64        // CFS periods with runnable tasks (nr_periods)
	ThrottledPeriods uint64        // of those, periods that ran out of quota (nr_throttled)
	MemoryUsage      uint64        // bytes charged (usage_in_bytes, memory.current)
	MemoryLimit      uint64        // bytes; 0: no limit
}

// noLimit: the kernel reports "no memory limit" as PAGE_COUNTER_MAX pages
// (v1, about 2^63) or "max" (v2, the library's MaxUint64).
const noLimit = 1 << 62

// ErrNoLibraryPath: Paths built by hand (tests) carry no library handle.
var ErrNoLibraryPath = errors.New("cgroups: group not resolved through the library")

// Stats reads p's statistics through the library.
func (p Paths) Stats() (Stats, error) {
	var s Stats
	switch {
	case p.Version == V2 && p.group != "":
		m, err := cg2.Load(p.group, cg2.WithMountpoint(unifiedMount))
		if err != nil {
			return s, err
		}
		st, err := m.StatFiltered(cg2.StatCPU | cg2.StatMemory)
		if err != nil {
			return s, err
		}
		if c := st.GetCPU(); c != nil {
			s.CPUUsage = time.Duration(c.UsageUsec) * time.Microsecond
			s.CPUThrottled = time.Duration(c.ThrottledUsec) * time.Microsecond
			s.Periods, s.ThrottledPeriods = c.NrPeriods, c.NrThrottled
		}
		if mem := st.GetMemory(); mem != nil {
			s.MemoryUsage = mem.Usage
			if mem.UsageLimit < noLimit {
				s.MemoryLimit = mem.UsageLimit
			}
		}
		return s, nil
	case p.Version == V1 && p.v1 != nil:
		c, err := p.libV1(cg1.Cpu, cg1.Cpuacct, cg1.Memory)
		if err != nil {
			return s, err
		}
		st, err := c.Stat(cg1.IgnoreNotExist)
		if err != nil {
			return s, err
		}
		if cpu := st.GetCPU(); cpu != nil {
			s.CPUUsage = time.Duration(cpu.GetUsage().GetTotal())
			t := cpu.GetThrottling()
			s.CPUThrottled = time.Duration(t.GetThrottledTime())
			s.Periods, s.ThrottledPeriods = t.GetPeriods(), t.GetThrottledPeriods()
		}
		if mem := st.GetMemory(); mem != nil {
			s.MemoryUsage = mem.GetUsage().GetUsage()
			if l := mem.GetUsage().GetLimit(); l < noLimit {
				s.MemoryLimit = l
			}
		}
		return s, nil
	}
	return s, ErrNoLibraryPath
}

// libV1 loads the group in the library with only the named controllers
// (a Stat or Update then touches nothing else).
func (p Paths) libV1(names ...cg1.Name) (cg1.Cgroup, error) {
	subs, err := v1Hierarchy()
	if err != nil {
		return nil, err
	}
	var want []cg1.Subsystem
	for _, s := range subs {
		for _, n := range names {
			if s.Name() == n {
				want = append(want, s)
			}
		}
	}
	c, err := cg1.Load(p.v1, cg1.WithHierarchy(func() ([]cg1.Subsystem, error) { return want, nil }))
	if err != nil {
		return nil, fmt.Errorf("cgroups: load %s: %w", p.Key(), err)
	}
	return c, nil
}
