// Package limits applies container limits: the fast path writes cgroup
// files through descriptors opened once (Escra §IV-C/D: changes within a
// period), and a background reconciler brings Docker's own view (docker
// inspect) up to date through ContainerUpdate, batched and retried, never
// on the fast path.
package limits

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// ErrStale reports an update older than one already applied.
var ErrStale = errors.New("limits: stale generation")

// ErrUnknown reports a handle the applier does not know.
var ErrUnknown = errors.New("limits: unknown container")

// Current is what the applier believes a container's cgroup holds.
type Current struct {
	CPUQuotaUs  int64
	CPUPeriodUs uint32
	CPUBurstUs  int64 // CFS burst; 0 when none or the kernel has none
	MemoryBytes int64 // cgroups.Max: unlimited
	MemswBytes  int64 // v1 memory+swap; cgroups.Max: unlimited or absent
	CpusetCpus  string
}

// Entry is one managed container's limit state.
type Entry struct {
	ID     string
	Docker bool // reconcile Docker's view after changes
	G      *cgroups.Group
	// NoDockerCPUs keeps the cpuset out of Docker's view (the shared
	// cpusets of escrad's CPU placement: rewritten whenever escrad starts).
	NoDockerCPUs atomic.Bool
	// DockerNanoCPUs: the container was created with `--cpus`. Docker then
	// refuses a CpuQuota/CpuPeriod update ("Conflicting options"), so its
	// view is kept as NanoCPUs instead.
	DockerNanoCPUs atomic.Bool

	// burst is the CFS burst kept as a share of the quota (Applier.Burst);
	// 0 leaves whatever burst the group has, clamped to the quota.
	burst float64

	mu      sync.Mutex
	gen     uint64 // newest controller generation applied
	version uint64 // bumped on every write (any cause), for the reconciler
	cur     Current
	memAt   time.Time // when the last memory write was issued

	// Docker's view in flight (no budget violation from a late docker update): runc writes what a docker update
	// carries when Docker gets to it, which may be after a newer cut. Until
	// the reconciler knows the update settled, a cut below what it carries
	// is written but not acknowledged (HoldAck), so the controller keeps the
	// larger limit counted and hands out nothing runc could take back.
	dockerOut bool
	dockerCPU float64 // largest quota among those updates, cores (+Inf: unlimited)
	dockerMem int64   // largest memory limit among them (cgroups.Max: unlimited)
	heldGen   uint64  // newest generation whose acknowledgement waits on Docker
}

// cores is quota/period; unlimited is +Inf.
func cores(quota int64, period uint32) float64 {
	if quota < 0 || period == 0 {
		return math.Inf(1)
	}
	return float64(quota) / float64(period)
}

// memBelow reports whether limit a is below b (cgroups.Max is unlimited).
func memBelow(a, b int64) bool {
	return a != cgroups.Max && (b == cgroups.Max || a < b)
}

// sendingDocker notes that a docker update carrying c is on its way; e.mu
// is held. Several may be unsettled at once (a timed-out one may still
// land): the largest values count.
func (e *Entry) sendingDocker(c Current) {
	cpu := cores(c.CPUQuotaUs, c.CPUPeriodUs)
	if !e.dockerOut {
		e.dockerOut, e.dockerCPU, e.dockerMem = true, cpu, c.MemoryBytes
		return
	}
	e.dockerCPU = max(e.dockerCPU, cpu)
	if memBelow(e.dockerMem, c.MemoryBytes) {
		e.dockerMem = c.MemoryBytes
	}
}

// dockerAbove reports whether an unsettled docker update carries more
// CPU or memory than the limits in place; e.mu is held.
func (e *Entry) dockerAbove() bool {
	return e.dockerOut && (cores(e.cur.CPUQuotaUs, e.cur.CPUPeriodUs) < e.dockerCPU ||
		memBelow(e.cur.MemoryBytes, e.dockerMem))
}

// MemoryWriteIssued is when the last memory limit write was issued. The
// kernel wakes tasks waiting in a v1 OOM inside that write (a few µs), so
// this, not the write's return, is when a rescued container runs again: the
// return can be late because the woken tasks preempt the writer.
func (e *Entry) MemoryWriteIssued() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.memAt
}

// NewEntry reads the group's current limits.
func NewEntry(id string, docker bool, g *cgroups.Group) (*Entry, error) {
	e := &Entry{ID: id, Docker: docker, G: g}
	q, p, err := g.CPULimit()
	if err != nil {
		return nil, fmt.Errorf("limits: read cpu limit: %w", err)
	}
	e.cur.CPUQuotaUs, e.cur.CPUPeriodUs = q, uint32(p)
	if g.Has(cgroups.CPUBurst) {
		if e.cur.CPUBurstUs, err = g.ReadInt(cgroups.CPUBurst); err != nil {
			return nil, fmt.Errorf("limits: read cpu burst: %w", err)
		}
	}
	if e.cur.MemoryBytes, err = g.ReadInt(cgroups.MemLimit); err != nil {
		return nil, fmt.Errorf("limits: read memory limit: %w", err)
	}
	e.cur.MemswBytes = cgroups.Max
	if g.Has(cgroups.MemswLimit) {
		if e.cur.MemswBytes, err = g.ReadInt(cgroups.MemswLimit); err != nil {
			return nil, fmt.Errorf("limits: read memsw limit: %w", err)
		}
	}
	if g.Has(cgroups.CPUSetCPUs) {
		var buf [256]byte
		if b, err := g.Read(cgroups.CPUSetCPUs, buf[:]); err == nil {
			e.cur.CpusetCpus = trimNL(string(b))
		}
	}
	return e, nil
}

func trimNL(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	return s
}

// Current returns a copy of the believed limits and the generation.
func (e *Entry) Current() (Current, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur, e.gen
}

// Applier maps handles to entries and applies updates.
type Applier struct {
	mu      sync.RWMutex
	entries map[uint32]*Entry
	// Reconcile, when set, is told about every change to a Docker container.
	Reconcile interface{ Mark(h uint32) }
	// Burst, in [0, 1], keeps every managed group's CFS burst at this share
	// of its quota (cpu.cfs_burst_us, Linux >= 5.14): unused runtime carries
	// over to absorb a period with more arrivals than the quota. 0 leaves
	// bursts as they are. Set before the first Add.
	Burst float64

	Writes atomic.Uint64 // successful fast-path updates
}

// New returns an empty applier.
func New() *Applier { return &Applier{entries: map[uint32]*Entry{}} }

// Add registers h.
func (a *Applier) Add(h uint32, e *Entry) {
	a.mu.Lock()
	e.burst = a.Burst
	a.entries[h] = e
	a.mu.Unlock()
}

// Remove forgets h.
func (a *Applier) Remove(h uint32) {
	a.mu.Lock()
	delete(a.entries, h)
	a.mu.Unlock()
}

// Get returns h's entry.
func (a *Applier) Get(h uint32) *Entry {
	a.mu.RLock()
	e := a.entries[h]
	a.mu.RUnlock()
	return e
}

// Handles lists the known handles.
func (a *Applier) Handles() []uint32 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	hs := make([]uint32, 0, len(a.entries))
	for h := range a.entries {
		hs = append(hs, h)
	}
	return hs
}

// Apply writes l to h's cgroup unless gen is older than the newest applied
// (gen 0 is not versioned and always applies). Zero fields leave a limit
// unchanged; a CPU quota of -1 means unlimited.
func (a *Applier) Apply(h uint32, gen uint64, l *pb.Limits) error {
	e := a.Get(h)
	if e == nil {
		return ErrUnknown
	}
	if err := validate(l); err != nil {
		return err
	}
	e.mu.Lock()
	if gen != 0 && gen < e.gen {
		e.mu.Unlock()
		return ErrStale
	}
	err := e.write(l.GetCpuQuotaUs(), l.GetCpuPeriodUs(), l.GetMemoryLimitBytes(), l.GetCpusetCpus())
	if err == nil && gen > e.gen {
		e.gen = gen
	}
	docker := e.Docker
	e.mu.Unlock()
	if err != nil {
		return err
	}
	a.Writes.Add(1)
	if docker && a.Reconcile != nil {
		a.Reconcile.Mark(h)
	}
	return nil
}

// validate refuses values the protocol does not define (only -1 means
// unlimited) before anything is written.
func validate(l *pb.Limits) error {
	if q := l.GetCpuQuotaUs(); q < -1 {
		return fmt.Errorf("limits: cpu quota %d", q)
	}
	if m := l.GetMemoryLimitBytes(); m < -1 {
		return fmt.Errorf("limits: memory limit %d", m)
	}
	if p := l.GetCpuPeriodUs(); p != 0 && (p < 1000 || p > 1000000) {
		return fmt.Errorf("limits: cpu period %d µs outside [1000, 1000000]", p)
	}
	return nil
}

// RaiseMemory sets h's memory limit to limit if that is higher than the
// current one (an OOM grant); it returns the limit in place afterwards.
func (a *Applier) RaiseMemory(h uint32, limit int64) (int64, error) {
	e := a.Get(h)
	if e == nil {
		return 0, ErrUnknown
	}
	e.mu.Lock()
	var err error
	cur := e.cur.MemoryBytes
	if cur != cgroups.Max && (limit == cgroups.Max || limit > 0 && limit > cur) {
		err = e.write(0, 0, limit, "")
	}
	now := e.cur.MemoryBytes
	docker := e.Docker
	e.mu.Unlock()
	if err == nil && now != cur && docker && a.Reconcile != nil {
		a.Reconcile.Mark(h)
	}
	return now, err
}

// RaiseCPU raises h's CPU quota on the daemon's own authority (host-local
// leases): raise gets the current quota and period and returns
// the quota to write (<= the current one: nothing is written). The write
// bumps no generation: the controller answers it with a newer one. It
// returns the quota in place afterwards.
func (a *Applier) RaiseCPU(h uint32, raise func(quotaUs int64, periodUs uint32) int64) (int64, error) {
	e := a.Get(h)
	if e == nil {
		return 0, ErrUnknown
	}
	e.mu.Lock()
	var err error
	cur := e.cur.CPUQuotaUs
	if q := raise(cur, e.cur.CPUPeriodUs); cur != cgroups.Max && q > cur {
		err = e.write(q, 0, 0, "")
	}
	now := e.cur.CPUQuotaUs
	docker := e.Docker
	e.mu.Unlock()
	if err == nil && now != cur {
		a.Writes.Add(1)
		if docker && a.Reconcile != nil {
			a.Reconcile.Mark(h)
		}
	}
	return now, err
}

// write applies non-zero fields; e.mu is held. The v1 kernel requires
// memory.limit <= memory.memsw.limit at every instant, so memsw is written
// first when raising and last when lowering; the swap allowance
// (memsw - memory) the container started with is kept.
func (e *Entry) write(quota int64, period uint32, mem int64, cpus string) error {
	if quota != 0 || period != 0 {
		q := quota
		if q == 0 {
			q = e.cur.CPUQuotaUs
		}
		if q < 0 {
			q = cgroups.Max
		}
		// The kernel refuses a quota below the burst (SetCPULimitBurst
		// orders the writes).
		b := e.burstFor(q)
		if err := e.G.SetCPULimitBurst(q, period, b, e.cur.CPUBurstUs); err != nil {
			if q2, p2, rerr := e.G.CPULimit(); rerr == nil {
				e.cur.CPUQuotaUs, e.cur.CPUPeriodUs = q2, uint32(p2)
			}
			if b2, rerr := e.G.ReadInt(cgroups.CPUBurst); rerr == nil {
				e.cur.CPUBurstUs = b2
			}
			e.version++
			return fmt.Errorf("cpu limit: %w", err)
		}
		e.cur.CPUQuotaUs, e.cur.CPUBurstUs = q, b
		if period != 0 {
			e.cur.CPUPeriodUs = period
		}
		e.version++
	}
	if mem != 0 {
		if mem > 0 && (e.cur.MemoryBytes == cgroups.Max || mem < e.cur.MemoryBytes) {
			// Lowering below usage would make the write reclaim (and block
			// this path) or fail: refuse it; reclaim uses usage + δ.
			if u, err := e.G.ReadInt(cgroups.MemUsage); err == nil && u > mem {
				return fmt.Errorf("memory limit %d below usage %d", mem, u)
			}
		}
		if err := e.writeMemory(mem); err != nil {
			return err
		}
		e.version++
	}
	if cpus != "" && cpus != e.cur.CpusetCpus {
		if err := e.G.Write(cgroups.CPUSetCPUs, []byte(cpus)); err != nil {
			return fmt.Errorf("cpuset.cpus: %w", err)
		}
		e.cur.CpusetCpus = cpus
		e.version++
	}
	return nil
}

// burstFor is the burst to hold with quota q (µs; cgroups.Max:
// unlimited); e.mu is held.
func (e *Entry) burstFor(q int64) int64 {
	if !e.G.Has(cgroups.CPUBurst) || q == cgroups.Max {
		return e.cur.CPUBurstUs
	}
	if e.burst > 0 {
		return int64(e.burst * float64(q))
	}
	return min(e.cur.CPUBurstUs, q)
}

func (e *Entry) writeMemory(mem int64) error {
	if mem < 0 {
		mem = cgroups.Max
	}
	old, oldSw := e.cur.MemoryBytes, e.cur.MemswBytes
	e.memAt = time.Now()
	swapped := e.G.Has(cgroups.MemswLimit) && oldSw != cgroups.Max && old != cgroups.Max
	if !swapped {
		if err := e.G.WriteInt(cgroups.MemLimit, mem); err != nil {
			return fmt.Errorf("memory limit: %w", err)
		}
		e.cur.MemoryBytes = mem
		return nil
	}
	sw := cgroups.Max
	if mem != cgroups.Max {
		sw = mem + (oldSw - old)
	}
	raising := mem == cgroups.Max || mem > old
	if raising {
		if err := e.G.WriteInt(cgroups.MemswLimit, sw); err != nil {
			return fmt.Errorf("memsw limit: %w", err)
		}
		e.cur.MemswBytes = sw
		if err := e.G.WriteInt(cgroups.MemLimit, mem); err != nil {
			return fmt.Errorf("memory limit: %w", err)
		}
		e.cur.MemoryBytes = mem
		return nil
	}
	if err := e.G.WriteInt(cgroups.MemLimit, mem); err != nil {
		return fmt.Errorf("memory limit: %w", err)
	}
	e.cur.MemoryBytes = mem
	if err := e.G.WriteInt(cgroups.MemswLimit, sw); err != nil {
		return fmt.Errorf("memsw limit: %w", err)
	}
	e.cur.MemswBytes = sw
	return nil
}

// Reclaim applies Escra §IV-C to each handle (all when hs is empty):
// when limit > usage + margin, limit ← usage + margin (page-aligned up, so
// never below usage). Containers without a memory limit are left alone.
func (a *Applier) Reclaim(margin uint64, hs []uint32) []*pb.ReclaimResult_Reclaimed {
	if len(hs) == 0 {
		hs = a.Handles()
	}
	var out []*pb.ReclaimResult_Reclaimed
	for _, h := range hs {
		e := a.Get(h)
		if e == nil {
			continue
		}
		// Not while an unsettled docker update carries a memory limit:
		// runc could put it back after the controller handed the bytes
		// on. Checked first, so a skipped reclaim keeps the peak.
		e.mu.Lock()
		busy := e.dockerOut && e.dockerMem != 0
		e.mu.Unlock()
		if busy {
			continue
		}
		usage, err := e.G.ReadInt(cgroups.MemUsage)
		if err != nil || usage < 0 {
			continue
		}
		// Not below what the group used since the previous reclaim: a
		// reclaim in a lull would otherwise leave a bursty container δ
		// above its trough, and its next burst would wait on OOM rescues
		// (seen with demo-http). Escra §IV-C's usage + δ where the
		// kernel keeps no resettable peak.
		need := usage
		if peak, ok := e.G.MemPeak(); ok {
			need = max(usage, peak)
			_ = e.G.ResetMemPeak()
		}
		e.mu.Lock()
		old := e.cur.MemoryBytes
		target := (need + int64(margin) + 4095) &^ 4095
		changed := false
		if e.dockerOut && e.dockerMem != 0 {
			// An update was sent since the check above (the peak it
			// reset is lost for this round: rare, and safe).
			e.mu.Unlock()
			continue
		}
		if old != cgroups.Max && old > 0 && old > target {
			if err := e.writeMemory(target); err == nil {
				e.version++
				changed = true
			}
		}
		now := e.cur.MemoryBytes
		docker := e.Docker
		e.mu.Unlock()
		if !changed {
			continue
		}
		out = append(out, &pb.ReclaimResult_Reclaimed{
			Handle: h, OldLimitBytes: old, NewLimitBytes: now,
			UsageBytes: uint64(usage), ReclaimedBytes: uint64(old - now),
		})
		if docker && a.Reconcile != nil {
			a.Reconcile.Mark(h)
		}
	}
	return out
}

// ResetGenerations forgets the newest generation applied to every entry:
// generations count per controller session, so a new session (after a
// restart or a failover) starts again from 1.
func (a *Applier) ResetGenerations() {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, e := range a.entries {
		e.mu.Lock()
		e.gen, e.heldGen = 0, 0
		e.mu.Unlock()
	}
}

// Restore writes l (zero fields unchanged, -1 unlimited) to h's cgroup
// unless a controller decision was applied since the last
// ResetGenerations: a session that came back first wins over the restore.
// It reports whether it wrote.
func (a *Applier) Restore(h uint32, l Current) (bool, error) {
	e := a.Get(h)
	if e == nil {
		return false, ErrUnknown
	}
	e.mu.Lock()
	if e.gen != 0 {
		e.mu.Unlock()
		return false, nil
	}
	err := e.write(l.CPUQuotaUs, l.CPUPeriodUs, l.MemoryBytes, "")
	docker := e.Docker
	e.mu.Unlock()
	if err != nil {
		return false, err
	}
	a.Writes.Add(1)
	if docker && a.Reconcile != nil {
		a.Reconcile.Mark(h)
	}
	return true, nil
}

// SetCPUs writes h's cpuset.cpus (escrad's host CPU allocator, WYSIWYG containers;
// the allocator orders these writes) and reconciles Docker's view.
func (a *Applier) SetCPUs(h uint32, cpus string) error {
	e := a.Get(h)
	if e == nil {
		return ErrUnknown
	}
	if cpus == "" {
		return errors.New("limits: empty cpuset")
	}
	e.mu.Lock()
	changed := cpus != e.cur.CpusetCpus
	err := e.write(0, 0, 0, cpus)
	docker := e.Docker
	e.mu.Unlock()
	if err == nil && changed {
		a.Writes.Add(1)
		if docker && a.Reconcile != nil {
			a.Reconcile.Mark(h)
		}
	}
	return err
}

// HoldAck reports whether the acknowledgement of generation gen, just
// applied to h, must wait until Docker's view settles: an unsettled docker
// update carries more CPU or memory than h now has (seen in the soak test). The
// reconciler calls its Settled hook with the newest generation held once
// the update returned and the newest limits are back in the cgroup.
func (a *Applier) HoldAck(h uint32, gen uint64) bool {
	e := a.Get(h)
	if e == nil || gen == 0 {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.dockerAbove() {
		return false
	}
	e.heldGen = max(e.heldGen, gen)
	return true
}

// Generation is the newest controller generation applied to h.
func (a *Applier) Generation(h uint32) (uint64, bool) {
	e := a.Get(h)
	if e == nil {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gen, true
}
