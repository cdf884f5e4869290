// Package sampler reads, every 100 ms, the CPU and memory usage and limits
// of the benchmark's containers straight from their cgroups, independently
// of the policy under test, so every policy is measured the same way
// (the benchmark's metrics: slack = limit − usage, throttled periods, OOM kills).
package sampler

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/bench/report"
	"github.com/escra-dev/escra/daemon/cgroups"
)

// ContainerSample is one container at one instant.
type ContainerSample struct {
	ID, Name    string
	CPUUsage    float64 // cores, averaged since the previous sample
	CPULimit    float64 // cores; the host's CPUs when unlimited
	MemUsage    float64 // bytes (memory.usage_in_bytes / memory.current)
	MemLimit    float64 // bytes; the host's memory when unlimited
	NrPeriods   uint64  // cumulative cpu.stat counters
	NrThrottled uint64
	// ThrottledUs is cumulative cpu.stat throttled time. Unlike
	// nr_throttled, which counts only periods still throttled at their
	// end, it also counts throttles a quota raise ended mid-period.
	ThrottledUs uint64
	Valid       bool // false for the first sample of a container (no usage rate yet) or when unreadable
}

type Snapshot struct {
	T   time.Time
	Per []ContainerSample
}

type container struct {
	id, name string
	g        *cgroups.Group
	prevNs   uint64
	prevT    time.Time
}

// Sampler samples a fixed set of containers of one engine.
type Sampler struct {
	cli      *client.Client
	hostCPUs float64
	hostMem  float64
	mu       sync.Mutex
	cs       []*container
}

// New resolves the cgroups of the containers (IDs or names; they must be running).
func New(ctx context.Context, cli *client.Client, ids []string) (*Sampler, error) {
	s := &Sampler{cli: cli, hostCPUs: float64(runtime.NumCPU())}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		s.hostMem = float64(si.Totalram) * float64(si.Unit)
	}
	for _, id := range ids {
		c := &container{id: id}
		if err := s.open(ctx, c); err != nil {
			s.Close()
			return nil, err
		}
		s.cs = append(s.cs, c)
	}
	return s, nil
}

func (s *Sampler) open(ctx context.Context, c *container) error {
	in, err := s.cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("sampler: %w", err)
	}
	if in.Container.State == nil || in.Container.State.Pid <= 0 {
		return fmt.Errorf("sampler: container %s is not running", c.id)
	}
	p, err := cgroups.PathsForPID(in.Container.State.Pid)
	if err != nil {
		return fmt.Errorf("sampler: cgroups of %s: %w", c.id, err)
	}
	g, err := cgroups.Open(p)
	if err != nil {
		return fmt.Errorf("sampler: %w", err)
	}
	if c.g != nil {
		c.g.Close()
	}
	c.id, c.name, c.g, c.prevT = in.Container.ID, trimSlash(in.Container.Name), g, time.Time{}
	return nil
}

func trimSlash(n string) string {
	if len(n) > 0 && n[0] == '/' {
		return n[1:]
	}
	return n
}

// Group returns the open cgroup of a container (ID or name), for appliers.
func (s *Sampler) Group(id string) (*cgroups.Group, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cs {
		if c.id == id || c.name == id {
			return c.g, true
		}
	}
	return nil, false
}

// HostCPUs and HostMem are what "unlimited" means in slack.
func (s *Sampler) HostCPUs() float64 { return s.hostCPUs }
func (s *Sampler) HostMem() float64  { return s.hostMem }

func (s *Sampler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cs {
		if c.g != nil {
			c.g.Close()
			c.g = nil
		}
	}
}

// usageNs reads cumulative CPU time: cpuacct.usage on v1, usage_usec on v2.
func usageNs(g *cgroups.Group, st *cgroups.CPUStat) (uint64, error) {
	if st.HasUsage {
		return st.UsageUs * 1000, nil
	}
	v, err := g.ReadInt(cgroups.CPUAcctUsage)
	return uint64(v), err
}

// Sample reads every container once. A container whose cgroup went away
// (restarted after an OOM kill) is re-resolved; while it is down its
// sample is not Valid.
func (s *Sampler) Sample(ctx context.Context) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	snap := Snapshot{T: now}
	var buf [512]byte
	for _, c := range s.cs {
		cs := ContainerSample{ID: c.id, Name: c.name}
		if err := s.read(c, now, &cs, buf[:]); err != nil {
			if s.open(ctx, c) == nil {
				s.read(c, now, &cs, buf[:])
			}
		}
		snap.Per = append(snap.Per, cs)
	}
	return snap
}

func (s *Sampler) read(c *container, now time.Time, cs *ContainerSample, buf []byte) error {
	if c.g == nil {
		return fmt.Errorf("closed")
	}
	var st cgroups.CPUStat
	b, err := c.g.Read(cgroups.CPUStatFile, buf)
	if err != nil {
		return err
	}
	if err := cgroups.ParseCPUStat(b, &st); err != nil {
		return err
	}
	ns, err := usageNs(c.g, &st)
	if err != nil {
		return err
	}
	q, period, err := c.g.CPULimit()
	if err != nil {
		return err
	}
	mu, err := c.g.ReadInt(cgroups.MemUsage)
	if err != nil {
		return err
	}
	ml, err := c.g.ReadInt(cgroups.MemLimit)
	if err != nil {
		return err
	}
	cs.NrPeriods, cs.NrThrottled, cs.ThrottledUs = st.NrPeriods, st.NrThrottled, st.ThrottledUs
	cs.CPULimit = s.hostCPUs
	if q > 0 && period > 0 {
		cs.CPULimit = math.Min(s.hostCPUs, float64(q)/float64(period))
	}
	cs.MemUsage = float64(mu)
	cs.MemLimit = float64(ml)
	if ml < 0 || (s.hostMem > 0 && float64(ml) > s.hostMem) {
		cs.MemLimit = s.hostMem
	}
	if !c.prevT.IsZero() && ns >= c.prevNs {
		cs.CPUUsage = float64(ns-c.prevNs) / float64(now.Sub(c.prevT).Nanoseconds())
		cs.Valid = true
	}
	c.prevNs, c.prevT = ns, now
	return nil
}

// Run samples every period until ctx ends, handing each snapshot to f.
func (s *Sampler) Run(ctx context.Context, period time.Duration, f func(Snapshot)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(s.Sample(ctx))
		}
	}
}

// WatchOOM calls f for every OOM event of the engine's containers until
// ctx ends (Docker emits "oom" when the kernel's OOM killer hits a
// container's cgroup).
func WatchOOM(ctx context.Context, cli *client.Client, f func(id string, t time.Time)) error {
	evs := cli.Events(ctx, client.EventsListOptions{Filters: make(client.Filters).Add("type", "container").Add("event", "oom")})
	msgs, errs := evs.Messages, evs.Err
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case m := <-msgs:
			f(m.Actor.ID, time.Unix(0, m.TimeNano))
		}
	}
}

// WatchKills calls f for every OOM kill of a container: a "die" event with
// exit code 137 (SIGKILL) within 5 s of an "oom" event of the same
// container. An "oom" event alone is not a kill: the cgroup hit its limit,
// and with Escra's OOM interception the allocation may have been rescued.
func WatchKills(ctx context.Context, cli *client.Client, f func(id string, t time.Time)) error {
	evs := cli.Events(ctx, client.EventsListOptions{Filters: make(client.Filters).Add("type", "container").Add("event", "oom").Add("event", "die")})
	msgs, errs := evs.Messages, evs.Err
	lastOOM := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case m := <-msgs:
			t := time.Unix(0, m.TimeNano)
			switch m.Action {
			case "oom":
				lastOOM[m.Actor.ID] = t
			case "die":
				if o, ok := lastOOM[m.Actor.ID]; ok && m.Actor.Attributes["exitCode"] == "137" && t.Sub(o) < 5*time.Second {
					delete(lastOOM, m.Actor.ID)
					f(m.Actor.ID, t)
				}
			}
		}
	}
}

// Recorder turns snapshots into the report's per-run fields.
type Recorder struct {
	Start  time.Time
	Series string // container (name or ID) whose limit and usage are recorded
	mu     sync.Mutex
	slack  []report.SlackSample
	series []report.SeriesPoint
	acc    map[string][3]uint64 // periods, throttled periods and throttled µs since the first sample
	last   map[string][3]uint64
	limits map[string][2]float64
	// LimitChanges counts samples in which a container's CPU or memory
	// limit differed from its previous sample: the same count for every
	// policy, at the 100 ms sampling resolution.
	LimitChanges int
}

// Add records one snapshot: slack summed over containers, the series of
// one container, and throttling counters.
func (r *Recorder) Add(s Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.acc == nil {
		r.acc, r.last, r.limits = map[string][3]uint64{}, map[string][3]uint64{}, map[string][2]float64{}
	}
	if r.Start.IsZero() {
		r.Start = s.T
	}
	tms := s.T.Sub(r.Start).Milliseconds()
	var cpu, mem float64
	n := 0
	for _, c := range s.Per {
		if !c.Valid {
			continue
		}
		n++
		cpu += c.CPULimit - c.CPUUsage
		mem += (c.MemLimit - c.MemUsage) / (1 << 20)
		ctr := [3]uint64{c.NrPeriods, c.NrThrottled, c.ThrottledUs}
		if prev, ok := r.last[c.ID]; ok {
			a := r.acc[c.ID]
			for i := range ctr {
				if ctr[i] >= prev[i] {
					a[i] += ctr[i] - prev[i]
				} else {
					a[i] += ctr[i] // counters restarted with a new cgroup (container restarted)
				}
			}
			r.acc[c.ID] = a
		}
		r.last[c.ID] = ctr
		lim := [2]float64{c.CPULimit, c.MemLimit}
		if prev, ok := r.limits[c.ID]; ok && prev != lim {
			r.LimitChanges++
		}
		r.limits[c.ID] = lim
		if c.Name == r.Series || c.ID == r.Series {
			r.series = append(r.series, report.SeriesPoint{TMs: tms, CPULimit: c.CPULimit, CPUUsage: c.CPUUsage,
				MemLimitMiB: c.MemLimit / (1 << 20), MemUsageMiB: c.MemUsage / (1 << 20)})
		}
	}
	if n > 0 {
		r.slack = append(r.slack, report.SlackSample{TMs: tms, CPUCores: cpu, MemMiB: mem})
	}
}

// Fill writes the recorded slack, series and throttling into run.
func (r *Recorder) Fill(run *report.Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run.Slack = append(run.Slack, r.slack...)
	run.Series = append(run.Series, r.series...)
	run.SeriesContainer = r.Series
	run.LimitChanges += r.LimitChanges
	for _, a := range r.acc {
		run.Periods += int64(a[0])
		run.ThrottledPeriods += int64(a[1])
		run.ThrottledMs += float64(a[2]) / 1000
	}
}

// UsageNs reads a group's cumulative CPU time in ns (v1 cpuacct.usage, v2
// cpu.stat usage_usec).
func UsageNs(g *cgroups.Group) (uint64, error) {
	var st cgroups.CPUStat
	b, err := g.Read(cgroups.CPUStatFile, make([]byte, 512))
	if err != nil {
		return 0, err
	}
	if err := cgroups.ParseCPUStat(b, &st); err != nil {
		return 0, err
	}
	return usageNs(g, &st)
}
