package allocator

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Key names a member: the controller packs (session id, handle) into it.
type Key uint64

// Budget is a Distributed Container's global limits (Escra §IV-A).
type Budget struct {
	CPUCores    float64 // Ω in cores
	MemoryBytes int64   // global memory limit
	Sigma       float64 // share of memory withheld from bootstrap for OOM grants
}

// Validate rejects budgets the allocator cannot honour.
func (b Budget) Validate() error {
	switch {
	case !(b.CPUCores > 0) || b.CPUCores > 1e5:
		return fmt.Errorf("cpu %v cores: want > 0", b.CPUCores)
	case b.MemoryBytes < 4*MiB || b.MemoryBytes > 1<<50:
		return fmt.Errorf("memory %d bytes: want >= 4 MiB", b.MemoryBytes)
	case !(b.Sigma >= 0) || b.Sigma >= 1:
		return fmt.Errorf("sigma %v: want 0 <= sigma < 1", b.Sigma)
	}
	return nil
}

// Reason says why a decision was made; it travels to logs and events.
type Reason string

const (
	ReasonBootstrap     Reason = "bootstrap"      // eq. (2) on join
	ReasonRebalance     Reason = "rebalance"      // a join or a smaller budget took runtime back
	ReasonThrottled     Reason = "throttled"      // §IV-D-1 scale up
	ReasonUnused        Reason = "unused"         // §IV-D-1 scale down
	ReasonThrottleEvent Reason = "throttle-event" // raised inside a period (escra policy)
	ReasonLease         Reason = "lease"          // a daemon raised the quota from its host-local lease
	ReasonOOMGrant      Reason = "oom-grant"      // §IV-D-2
	ReasonPoolFilled    Reason = "pool-filled"    // memory assigned after reclaim refilled the pool
	ReasonSLO           Reason = "slo"            // a latency-SLO policy's target (pema)
)

// Decision is one container's new limits; zero fields stay unchanged.
// Gen increases per member with every decision, so the daemon can drop a
// stale one (docs/protocol.md).
type Decision struct {
	Key      Key
	Gen      uint64
	QuotaUs  int64
	MemLimit int64
	Reason   Reason
}

// Join describes a member at registration.
type Join struct {
	Key       Key
	HostMaxUs int64 // host cores × period: the most one member can use
	MemUsage  int64
	// The limits the container's cgroup holds now, as its daemon reports
	// them at registration (0: unknown; CurQuotaUs in the allocator's
	// period, HostMaxUs for an unlimited quota). With AckGated they are
	// counted until a decision replacing them is acknowledged, and a
	// rejoining container whose limits fit in the pools keeps them.
	CurQuotaUs, CurMem int64
	// MaxQuotaUs and MaxMem cap what the allocator sets for this member
	// (the spec's max_cpu and max_memory; 0: no cap).
	MaxQuotaUs, MaxMem int64
	// The container's own limits, what its daemon falls back to without a
	// controller (hold.go; OwnQuotaUs in the allocator's period; -1: none,
	// 0: unknown).
	OwnQuotaUs, OwnMem int64
}

// Member is the allocator's view of one container.
type Member struct {
	Key Key
	// HostMaxUs is the most quota it may get: the host's cores × period,
	// lowered to MaxQuotaUs when that is set.
	HostMaxUs int64
	// The per-container caps (0: none); hostUs is the host's own ceiling.
	MaxQuotaUs, MaxMem int64
	hostUs             int64
	QuotaUs            int64
	MemLimit           int64 // 0: not assigned yet (pool was empty at join)
	MemUsage           int64
	Gen                uint64

	// Sliding windows of the last n periods (§IV-D-1).
	th        []bool
	unused    []int64
	used      []int64 // runtime used per period, for the headroom floor
	pos, fill int
	thSum     int
	unusedSum int64
	lastSeq   uint64
	seen      bool
	decayPeak float64 // µs per period, halved every PeakHalfLife
	raisedSeq uint64  // 1 + the period a throttle event last raised the quota in (0: none)

	Periods, Throttles, ThrottleEvents uint64
	OOMRequests, OOMGrants, OOMDenies  uint64
	LastUsageUs                        int64

	// Acknowledged accounting (applied.go).
	ackQuota, ackMem   int64
	pend               []pendLimit
	extraCPU, extraMem int64
	wantQuota          int64 // bootstrap share not given yet (cuts unacknowledged)
	ownQuota, ownMem   int64 // Join.OwnQuotaUs, OwnMem
}

// memberBlock holds a member and its windows in one allocation, so a
// period's statistic touches adjacent cache lines, not four objects
// scattered over the heap (the UDP reader decides for thousands of
// members whose books do not stay in cache).
type memberBlock struct {
	m            Member
	unused, used [maxInlineWindow]int64
	th           [maxInlineWindow]bool
}

const maxInlineWindow = 16

func newMember(n int) *Member {
	if n > maxInlineWindow {
		return &Member{th: make([]bool, n), unused: make([]int64, n), used: make([]int64, n)}
	}
	b := &memberBlock{}
	b.m.th, b.m.unused, b.m.used = b.th[:n:n], b.unused[:n:n], b.used[:n:n]
	return &b.m
}

// AvgThrottle is Σ th / n over the window (divided by n as in the paper,
// so the first periods of a new member ramp up gently).
func (m *Member) AvgThrottle() float64 {
	return float64(m.thSum) / float64(len(m.th))
}

// AvgUnusedUs is Σ (q − u) / n over the window.
func (m *Member) AvgUnusedUs() float64 {
	return float64(m.unusedSum) / float64(len(m.unused))
}

// PeakUsedUs is the most runtime the member used in one period of the
// window.
func (m *Member) PeakUsedUs() int64 {
	var p int64
	for _, u := range m.used {
		p = max(p, u)
	}
	return p
}

func (m *Member) push(throttled bool, unused, used int64) {
	n := len(m.th)
	if m.fill == n {
		if m.th[m.pos] {
			m.thSum--
		}
		m.unusedSum -= m.unused[m.pos]
	} else {
		m.fill++
	}
	m.th[m.pos], m.unused[m.pos], m.used[m.pos] = throttled, unused, used
	if throttled {
		m.thSum++
	}
	m.unusedSum += unused
	m.pos = (m.pos + 1) % n
}

// Books are the books of one Distributed Container: its global pools,
// its members and their limits, and the decisions that change them.
type Books struct {
	Name   string
	P      Params
	Policy Policy

	budget   Budget
	omegaUs  int64 // Ω × period
	members  map[Key]*Member
	order    []Key // sorted, for deterministic iteration
	cpuAlloc int64 // Σ quotas
	memAlloc int64 // Σ assigned memory limits

	// Host-local CPU leases (lease.go); counted as allocated.
	leases       map[HostID]*lease
	leaseTotal   int64
	leaseSeq     uint64
	pendingLease []LeaseCmd

	// Host-local memory credit (memcredit.go); counted as assigned.
	// capsGen changes with the members and their max_memory, so a
	// credit's member list is hashed again only then.
	capsGen       uint64
	credits       map[HostID]*memCredit
	creditTotal   int64
	creditSeq     uint64
	pendingCredit []MemCreditCmd

	// Shares held for members whose host went silent (hold.go).
	held             map[string]held
	heldCPU, heldMem int64

	// AckGated counts unacknowledged cuts until the daemon applies them
	// (applied.go); the controller sets it, Replay does not.
	AckGated           bool
	cpuExtra, memExtra int64
	// HoldRaises: nothing is handed out from the pools (no raise, lease,
	// OOM grant or pending assignment; cuts and joins that keep their
	// limits go on). A controller that just started cannot know the
	// limits of hosts that have not rejoined yet (applied.go).
	HoldRaises bool
}

// NewBooks makes the books of an empty app; pol nil means the Escra policy.
func NewBooks(name string, b Budget, p Params, pol Policy) (*Books, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if pol == nil {
		pol = Escra{}
	}
	a := &Books{Name: name, P: p, Policy: pol, members: map[Key]*Member{}, leases: map[HostID]*lease{},
		credits: map[HostID]*memCredit{}, held: map[string]held{}}
	a.setBudget(b)
	return a, nil
}

func (a *Books) setBudget(b Budget) {
	a.budget = b
	a.omegaUs = int64(math.Floor(b.CPUCores * float64(a.P.PeriodUs())))
}

// Budget is the app's current budget.
func (a *Books) Budget() Budget { return a.budget }

// OmegaUs is Ω in µs per period.
func (a *Books) OmegaUs() int64 { return a.omegaUs }

// CPUAllocatedUs is Σ member quotas.
func (a *Books) CPUAllocatedUs() int64 { return a.cpuAlloc }

// MemAllocated is Σ assigned member memory limits.
func (a *Books) MemAllocated() int64 { return a.memAlloc }

// CPUUnallocatedUs is Ω − Σ quotas − Σ leases − Σ held − Σ unacknowledged
// cuts.
func (a *Books) CPUUnallocatedUs() int64 {
	return max(0, a.omegaUs-a.CountedCPUUs())
}

// targetFreeUs is Ω minus Σ target quotas, leases and held shares: what
// cuts already decided make room for, acknowledged or not. Paths that cut
// others to make room measure against it, so a cut waiting for its
// acknowledgement is not taken twice.
func (a *Books) targetFreeUs() int64 {
	return max(0, a.omegaUs-a.cpuAlloc-a.leaseTotal-a.heldCPU)
}

// MemUnallocated is the global memory limit minus Σ limits, Σ held and Σ
// unacknowledged cuts.
func (a *Books) MemUnallocated() int64 { return max(0, a.budget.MemoryBytes-a.CountedMem()) }

// Len is λ, the number of members.
func (a *Books) Len() int { return len(a.order) }

// Member returns a member or nil.
func (a *Books) Member(k Key) *Member { return a.members[k] }

// Members returns the members in key order.
func (a *Books) Members() []*Member {
	out := make([]*Member, 0, len(a.order))
	for _, k := range a.order {
		out = append(out, a.members[k])
	}
	return out
}

// floorUs is the floor, lowered to Ω/λ when the budget cannot give every
// member the configured floor (so Σ ≤ Ω always wins).
func (a *Books) floorUs(lambda int) int64 {
	f := a.P.CPUFloorUs
	if lambda > 0 {
		f = min(f, a.omegaUs/int64(lambda))
	}
	return max(f, 1)
}

func (a *Books) decide(m *Member, quota, mem int64, r Reason) Decision {
	d := Decision{Key: m.Key, Reason: r}
	// The caps hold whatever path decided (the paths clamp first; this
	// is the last word, so no policy can pass max_cpu or max_memory).
	if m.MaxQuotaUs > 0 && quota > m.MaxQuotaUs {
		quota = m.MaxQuotaUs
	}
	if m.MaxMem > 0 && mem > m.MaxMem {
		mem = m.MaxMem
	}
	if quota > 0 && quota != m.QuotaUs {
		a.cpuAlloc += quota - m.QuotaUs
		m.QuotaUs = quota
		d.QuotaUs = quota
	}
	if mem > 0 && mem != m.MemLimit {
		a.memAlloc += mem - m.MemLimit
		m.MemLimit = mem
		d.MemLimit = mem
	}
	if d.QuotaUs == 0 && d.MemLimit == 0 {
		a.refresh(m)
		return Decision{}
	}
	m.Gen++
	d.Gen = m.Gen
	a.record(m, d)
	return d
}

var (
	ErrDuplicate = errors.New("allocator: member already joined")
	ErrUnknown   = errors.New("allocator: unknown member")
)

// Join bootstraps a member per Escra §IV-A eq. (2): CPU Ω/λ and memory
// (1−σ)·M/λ with λ counting the newcomer. CPU it cannot take from the pool
// it takes from members above that fair share (their excess always
// covers it), so Σ quotas ≤ Ω holds. Memory is never taken by force (that
// would OOM-kill): the newcomer gets min(fair share, unallocated); when the
// pool is empty its limit stays unassigned until reclaim refills the pool
// (FillPending) or an OOM request is granted.
func (a *Books) Join(j Join) ([]Decision, error) {
	if _, ok := a.members[j.Key]; ok {
		return nil, ErrDuplicate
	}
	n := a.P.Window
	m := newMember(n)
	m.Key, m.HostMaxUs, m.MemUsage = j.Key, j.HostMaxUs, max(0, j.MemUsage)
	if m.HostMaxUs <= 0 {
		m.HostMaxUs = a.P.PeriodUs()
	}
	m.hostUs = m.HostMaxUs
	m.MaxQuotaUs, m.MaxMem = max(j.MaxQuotaUs, 0), max(j.MaxMem, 0)
	m.ownQuota, m.ownMem = j.OwnQuotaUs, j.OwnMem
	if m.MaxQuotaUs > 0 {
		m.HostMaxUs = min(m.HostMaxUs, m.MaxQuotaUs)
	}
	lambda := len(a.order) + 1
	roomQ, roomM := a.hostRoom(j.Key.Host()) // hostshare.go
	fair := max(a.floorUs(lambda), min(a.omegaUs/int64(lambda), m.HostMaxUs, roomQ))
	poolCPU, poolMem := a.CPUUnallocatedUs(), a.MemUnallocated()
	// What the cgroup holds is bounded by the host, not by the cap: an
	// uncapped cgroup may use the whole host until a cut is acknowledged.
	curQ, curM := min(max(j.CurQuotaUs, 0), m.hostUs), max(j.CurMem, 0)
	adoptQ0 := curQ <= m.HostMaxUs
	adoptQ := a.AckGated && curQ > 0 && curQ <= poolCPU && adoptQ0 && curQ <= roomQ
	adoptM := a.AckGated && curM >= 4*MiB && curM <= poolMem && (m.MaxMem == 0 || curM <= m.MaxMem) && curM <= roomM
	var out []Decision
	if need := fair - a.targetFreeUs(); need > 0 && !adoptQ {
		out = a.takeCPU(need, a.omegaUs/int64(lambda))
		if a.leaseTotal > 0 && fair > a.CPUUnallocatedUs() {
			a.queueRevokeAll()
		}
	}
	quota := min(fair, a.CPUUnallocatedUs())
	a.members[j.Key] = m
	a.capsGen++
	i := sort.Search(len(a.order), func(i int) bool { return a.order[i] >= j.Key })
	a.order = append(a.order, 0)
	copy(a.order[i+1:], a.order[i:])
	a.order[i] = j.Key
	// What its cgroup holds now: counted under AckGated, and what a
	// recommend-mode app shows as applied (recommend.go).
	m.ackQuota, m.ackMem = curQ, curM
	memFair := min(roomM, int64((1-a.budget.Sigma)*float64(a.budget.MemoryBytes)/float64(lambda)))
	if m.MaxMem > 0 {
		memFair = min(memFair, m.MaxMem)
	}
	mem := min(memFair, a.MemUnallocated())
	if a.creditTotal > 0 && memFair > a.MemUnallocated() {
		a.queueRevokeAllCredit() // the returns refill the pool (FillPending)
	}
	if a.AckGated {
		// The cgroup holds its current limits until a decision replacing
		// them is acknowledged: count them. A rejoining container (after
		// a controller or escrad restart) whose limits fit keeps them, so
		// the first to rejoin is never given a share the others' current
		// limits still hold. Otherwise eq. (2), with the share other
		// members' cuts free given once they are acknowledged.
		a.refresh(m)
		switch {
		case adoptQ:
			quota = curQ
		default:
			// Up to what it has plus the pool, and within Ω for the
			// targets (the others' cuts are decided, maybe not applied).
			quota = min(fair, curQ+a.CPUUnallocatedUs(), a.targetFreeUs())
			if a.HoldRaises {
				quota = min(quota, curQ)
			}
			if quota < fair {
				m.wantQuota = fair
			}
			if quota < a.floorUs(lambda) {
				quota = 0 // keep what it has until the pool can give the floor
			}
		}
		switch {
		case adoptM:
			mem = curM
		default: // only from the pool: memory is never taken by force
			mem = min(memFair, poolMem)
			if a.HoldRaises && curM > 0 {
				mem = min(mem, curM)
			}
		}
	}
	if mem < 4*MiB {
		mem = 0 // leave unassigned rather than set an unusable limit
	}
	if d := a.decide(m, quota, mem, ReasonBootstrap); d.Gen != 0 {
		out = append(out, d)
	}
	return out, nil
}

// takeCPU lowers members above fairUs toward it, in proportion to their
// excess, until need µs are free. It returns the decisions.
func (a *Books) takeCPU(need, fairUs int64) []Decision {
	var excess int64
	for _, k := range a.order {
		if m := a.members[k]; m.QuotaUs > fairUs {
			excess += m.QuotaUs - fairUs
		}
	}
	if excess <= 0 {
		return nil
	}
	var out []Decision
	total := need
	for _, k := range a.order {
		m := a.members[k]
		if m.QuotaUs <= fairUs || need <= 0 {
			continue
		}
		ex := m.QuotaUs - fairUs
		cut := min(ex, (total*ex+excess-1)/excess, need)
		need -= cut
		if d := a.decide(m, m.QuotaUs-cut, 0, ReasonRebalance); d.Gen != 0 {
			out = append(out, d)
		}
	}
	return out
}

// Leave returns a member's quota and memory to the pools. With fewer
// members the floor may rise (it is min(floor, Ω/λ)); members below it are
// raised.
func (a *Books) Leave(k Key) ([]Decision, error) {
	m, ok := a.members[k]
	if !ok {
		return nil, ErrUnknown
	}
	a.cpuAlloc -= m.QuotaUs
	a.memAlloc -= m.MemLimit
	a.cpuExtra -= m.extraCPU
	a.memExtra -= m.extraMem
	delete(a.members, k)
	a.capsGen++
	i := sort.Search(len(a.order), func(i int) bool { return a.order[i] >= k })
	a.order = append(a.order[:i], a.order[i+1:]...)
	return a.ensureFloor(), nil
}

// ensureFloor raises members below the floor, from the pool first and then
// from members above the floor. It always succeeds: λ·floor ≤ Ω.
func (a *Books) ensureFloor() []Decision {
	floor := a.floorUs(len(a.order))
	var need int64
	for _, k := range a.order {
		if m := a.members[k]; m.QuotaUs < floor {
			need += floor - m.QuotaUs
		}
	}
	if need == 0 {
		return nil
	}
	var out []Decision
	if short := need - a.targetFreeUs(); short > 0 {
		out = a.takeCPU(short, floor)
	}
	for _, k := range a.order {
		if m := a.members[k]; m.QuotaUs < floor {
			// From the pool only: with leases outstanding it may be short
			// until they return (then ensureFloor runs again).
			q := min(floor, m.QuotaUs+a.CPUUnallocatedUs())
			if q < floor && a.leaseTotal > 0 {
				a.queueRevokeAll()
			}
			if (q < floor && a.AckGated) || (a.HoldRaises && q > m.QuotaUs) {
				continue // the cuts that free it are not acknowledged yet (Redistribute)
			}
			if d := a.decide(m, q, 0, ReasonRebalance); d.Gen != 0 {
				out = append(out, d)
			}
		}
	}
	return out
}

// SetBudget replaces the budget. When Σ quotas exceed the new Ω, members
// are scaled down (proportionally, then the largest first) so the
// invariant holds again. Memory above a smaller budget is not cut (that
// would kill); it returns through reclaim, and grants wait until then.
func (a *Books) SetBudget(b Budget) ([]Decision, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	a.setBudget(b)
	if a.leaseTotal > 0 && a.cpuAlloc+a.leaseTotal > a.omegaUs {
		a.queueRevokeAll()
	}
	if a.creditTotal > 0 && a.memAlloc+a.creditTotal > b.MemoryBytes {
		a.queueRevokeAllCredit()
	}
	return append(a.fitCPU(), a.ensureFloor()...), nil
}

func (a *Books) fitCPU() []Decision {
	if a.cpuAlloc <= a.omegaUs || len(a.order) == 0 {
		return nil
	}
	floor := a.floorUs(len(a.order))
	scale := float64(a.omegaUs) / float64(a.cpuAlloc)
	got := map[Key]Decision{}
	for _, k := range a.order {
		m := a.members[k]
		q := max(floor, int64(float64(m.QuotaUs)*scale))
		if d := a.decide(m, q, 0, ReasonRebalance); d.Gen != 0 {
			got[k] = d
		}
	}
	for a.cpuAlloc > a.omegaUs { // floors pushed us over: trim the largest
		var big *Member
		for _, k := range a.order {
			if m := a.members[k]; big == nil || m.QuotaUs > big.QuotaUs {
				big = m
			}
		}
		cut := min(a.cpuAlloc-a.omegaUs, big.QuotaUs-floor)
		if cut <= 0 {
			break // unreachable: λ·floor ≤ Ω by floorUs
		}
		if d := a.decide(big, big.QuotaUs-cut, 0, ReasonRebalance); d.Gen != 0 {
			got[big.Key] = d
		}
	}
	out := make([]Decision, 0, len(got))
	for _, k := range a.order {
		if d, ok := got[k]; ok {
			out = append(out, d)
		}
	}
	return out
}

// SetHostMax changes a member's ceiling (host cores × period).
func (a *Books) SetHostMax(k Key, maxUs int64) []Decision {
	m := a.members[k]
	if m == nil || maxUs <= 0 {
		return nil
	}
	m.hostUs = maxUs
	if m.MaxQuotaUs > 0 {
		maxUs = min(maxUs, m.MaxQuotaUs)
	}
	m.HostMaxUs = maxUs
	if m.QuotaUs > maxUs {
		if d := a.decide(m, maxUs, 0, ReasonRebalance); d.Gen != 0 {
			return []Decision{d}
		}
	}
	return nil
}
