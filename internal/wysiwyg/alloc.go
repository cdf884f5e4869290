// Package wysiwyg is the WYSIWYG paper's hybrid CPU allocator (§IV-B, Algorithm 1):
// a host's cores are split into P1 (exclusive to one processor-sensitive
// container, C1), P2 (shared by fractions of C1 containers and by the
// shared pool) and P3 (the shared pool of C2 containers). A C1 container
// sees ⌈r⌉ cores for an allocation of r: its whole cores from P1 and its
// fraction on one P2 core; C2 containers share P2 ∪ P3 and CFS quota
// arbitrates what is shared.
//
// The package is pure: a Host holds the allocation, and every change
// returns the ordered cgroup writes (a Plan) that take the host from the
// old allocation to the new one without breaking the invariants at any
// step. escrad applies plans to real cgroups; the controller and the
// simulator run the same code to simulate a host (§IV-D, §V).
package wysiwyg

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Class is a container's type (§IV-B).
type Class uint8

const (
	// C2 containers are not processor sensitive: they share P2 ∪ P3.
	C2 Class = iota
	// C1 containers are processor sensitive: they get an exclusive cpuset.
	C1
)

func (c Class) String() string {
	if c == C1 {
		return "wysiwyg"
	}
	return "shared"
}

// Mode is the host's policy when WYSIWYG cannot be ensured (§IV-B3).
type Mode uint8

const (
	// Hard (principle-hard) refuses a C1 allocation that would not be
	// WYSIWYG.
	Hard Mode = iota
	// BestEffort allocates it on more P2 cores than ⌈r⌉ instead (CHOOSE_PROCS
	// without its limit n); it refuses only when the host lacks CPU.
	BestEffort
)

func (m Mode) String() string {
	if m == BestEffort {
		return "besteffort"
	}
	return "hard"
}

// ParseMode reads "hard" or "besteffort".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "hard", "principle-hard":
		return Hard, nil
	case "besteffort", "best-effort":
		return BestEffort, nil
	}
	return Hard, fmt.Errorf("wysiwyg mode %q: want hard or besteffort", s)
}

// Milli is one core in millicores (Algorithm 1 counts in mCPU).
const Milli = 1000

// ErrNotWYSIWYG is Algorithm 1's "abort allocation: cannot ensure
// WYSIWYG" (principle-hard only); it counts in the reject rate r of §V.
var ErrNotWYSIWYG = errors.New("cannot ensure WYSIWYG: not enough whole or fractional cores free")

// ErrNoCapacity is a refusal for want of CPU (Algorithm 1's Require):
// §V's r does not count it.
var ErrNoCapacity = errors.New("host lacks CPU for this allocation")

// Alloc is one container's allocation.
type Alloc struct {
	Class Class
	R     int64 // millicores (the quota)
	// P1 are the container's exclusive cores, P2 its booked fraction on
	// each shared core it sees (C1 only).
	P1 CPUSet
	P2 map[int]int64
}

// CPUs is the cpuset of a C1 allocation: p1 ∪ p2 (Algorithm 1 line 33).
func (a *Alloc) CPUs() CPUSet {
	s := append(CPUSet(nil), a.P1...)
	for c := range a.P2 {
		s = append(s, c)
	}
	return NewCPUSet(s...)
}

// SharedMilli is the C1 CPU time the allocation has on shared cores
// (§V's s counts it).
func (a *Alloc) SharedMilli() int64 {
	var s int64
	for _, v := range a.P2 {
		s += v
	}
	return s
}

func (a *Alloc) clone() *Alloc {
	b := *a
	b.P1 = append(CPUSet(nil), a.P1...)
	b.P2 = make(map[int]int64, len(a.P2))
	for k, v := range a.P2 {
		b.P2[k] = v
	}
	return &b
}

// Host is one host's allocation.
type Host struct {
	N    int
	Mode Mode
	// CountShared makes C2 allocations count against the host's capacity
	// (the simulator: no overcommit). escrad leaves it off: the
	// controller's quotas for shared containers may overcommit them,
	// which only makes them compete on P2 ∪ P3.
	CountShared bool

	owner []string // P1 owner per core, "" if not P1
	used  []int64  // C1 millicores booked per P2 core
	nfrac []int    // C1 fractions per core (> 0: the core is in P2)
	ctrs  map[string]*Alloc
	total int64 // booked millicores (C2 only with CountShared)
	nC2   int
}

// NewHost is an empty host of n cores (Algorithm 1 lines 2-4: all in P3).
func NewHost(n int, mode Mode) *Host {
	return &Host{N: n, Mode: mode, owner: make([]string, n), used: make([]int64, n),
		nfrac: make([]int, n), ctrs: map[string]*Alloc{}}
}

// Pools returns P1, P2 and P3.
func (h *Host) Pools() (p1, p2, p3 CPUSet) {
	for c := 0; c < h.N; c++ {
		switch {
		case h.owner[c] != "":
			p1 = append(p1, c)
		case h.nfrac[c] > 0:
			p2 = append(p2, c)
		default:
			p3 = append(p3, c)
		}
	}
	return
}

// SharedCPUs is the C2 cpuset, P2 ∪ P3 (Algorithm 1 line 6).
func (h *Host) SharedCPUs() CPUSet {
	var s CPUSet
	for c := 0; c < h.N; c++ {
		if h.owner[c] == "" {
			s = append(s, c)
		}
	}
	return s
}

// Get returns a copy of id's allocation.
func (h *Host) Get(id string) (Alloc, bool) {
	a, ok := h.ctrs[id]
	if !ok {
		return Alloc{}, false
	}
	return *a.clone(), true
}

// IDs lists the containers, sorted.
func (h *Host) IDs() []string {
	ids := make([]string, 0, len(h.ctrs))
	for id := range h.ctrs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// CPUs is id's cpuset now (C1: its own; C2: P2 ∪ P3).
func (h *Host) CPUs(id string) CPUSet {
	a := h.ctrs[id]
	if a == nil {
		return nil
	}
	if a.Class == C1 {
		return a.CPUs()
	}
	return h.SharedCPUs()
}

// Booked is the millicores booked on the host.
func (h *Host) Booked() int64 { return h.total }

// Clone copies the host (a simulation that must not touch the original).
func (h *Host) Clone() *Host {
	g := &Host{N: h.N, Mode: h.Mode, CountShared: h.CountShared, total: h.total, nC2: h.nC2,
		owner: append([]string(nil), h.owner...), used: append([]int64(nil), h.used...),
		nfrac: append([]int(nil), h.nfrac...), ctrs: make(map[string]*Alloc, len(h.ctrs))}
	for id, a := range h.ctrs {
		g.ctrs[id] = a.clone()
	}
	return g
}

func (h *Host) counts(a *Alloc) bool { return a.Class == C1 || h.CountShared }

// book and unbook move an allocation's cores between the pools.
func (h *Host) book(id string, a *Alloc) {
	for _, c := range a.P1 {
		h.owner[c] = id
	}
	for c, v := range a.P2 {
		h.used[c] += v
		h.nfrac[c]++
	}
	if h.counts(a) {
		h.total += a.R
	}
	if a.Class == C2 {
		h.nC2++
	}
	h.ctrs[id] = a
}

func (h *Host) unbook(id string, a *Alloc) {
	for _, c := range a.P1 {
		h.owner[c] = ""
	}
	for c, v := range a.P2 {
		h.used[c] -= v
		h.nfrac[c]--
	}
	if h.counts(a) {
		h.total -= a.R
	}
	if a.Class == C2 {
		h.nC2--
	}
	delete(h.ctrs, id)
}

// Simulate reports what Add would do without changing the host (§IV-D:
// the orchestrator asks each candidate host to simulate Algorithm 1).
func (h *Host) Simulate(class Class, r int64) (Alloc, error) {
	if r <= 0 {
		return Alloc{}, fmt.Errorf("allocation of %d millicores: must be positive", r)
	}
	a, err := h.allocate("", class, r, nil) // allocate only reads the host
	if err != nil {
		return Alloc{}, err
	}
	return *a, nil
}

// Add allocates r millicores to a new container id of class (Algorithm 1,
// ALLOCATE) and returns the writes that apply it.
func (h *Host) Add(id string, class Class, r int64) (Plan, error) {
	if _, dup := h.ctrs[id]; dup {
		return nil, fmt.Errorf("container %s is already allocated", id)
	}
	if r <= 0 {
		return nil, fmt.Errorf("allocation of %d millicores: must be positive", r)
	}
	before := h.snapshot()
	a, err := h.allocate(id, class, r, nil)
	if err != nil {
		return nil, err
	}
	h.book(id, a)
	return h.plan(before, id, 0, r), nil
}

// Resize changes id's allocation to r. A change that keeps the shape
// (the same number of whole cores, a fraction on the same core that still
// fits) is done in place: only the quota moves. Otherwise Algorithm 1 runs
// again for id with the rest of the host as it is, preferring id's own
// cores; if it fails, id keeps its old allocation and the error says why.
func (h *Host) Resize(id string, r int64) (Plan, error) {
	old := h.ctrs[id]
	if old == nil {
		return nil, fmt.Errorf("container %s is not allocated", id)
	}
	if r <= 0 {
		return nil, fmt.Errorf("allocation of %d millicores: must be positive", r)
	}
	if r == old.R {
		return nil, nil
	}
	before := h.snapshot()
	oldR := old.R
	if na := h.inPlace(old, r); na != nil {
		h.unbook(id, old)
		if h.counts(na) && h.total+r > int64(h.N)*Milli {
			h.book(id, old)
			return nil, ErrNoCapacity
		}
		h.book(id, na)
		return h.plan(before, id, oldR, r), nil
	}
	h.unbook(id, old)
	a, err := h.allocate(id, old.Class, r, old)
	if err != nil {
		h.book(id, old)
		return nil, err
	}
	h.book(id, a)
	return h.plan(before, id, oldR, r), nil
}

// inPlace returns old resized to r on the same cores, or nil.
func (h *Host) inPlace(old *Alloc, r int64) *Alloc {
	if old.Class == C2 {
		na := old.clone()
		na.R = r
		return na
	}
	whole, frac := r/Milli, r%Milli
	if int64(len(old.P1)) != whole {
		return nil
	}
	switch {
	case frac == 0 && len(old.P2) == 0:
	case frac > 0 && len(old.P2) == 1:
		for c, v := range old.P2 {
			if h.used[c]-v+frac > Milli {
				return nil
			}
		}
	default:
		return nil
	}
	na := old.clone()
	na.R = r
	for c := range na.P2 {
		na.P2[c] = frac
	}
	return na
}

// Remove frees id's allocation (its cores go back to P3).
func (h *Host) Remove(id string) Plan {
	a := h.ctrs[id]
	if a == nil {
		return nil
	}
	before := h.snapshot()
	h.unbook(id, a)
	return h.plan(before, id, a.R, 0)
}

// allocate is Algorithm 1 for one container; the host does not hold id.
// prev, when set, is id's previous allocation: among equal choices its
// cores come first, so a resize moves as few cores as it can.
func (h *Host) allocate(id string, class Class, r int64, prev *Alloc) (*Alloc, error) {
	if (class == C1 || h.CountShared) && h.total+r > int64(h.N)*Milli {
		return nil, ErrNoCapacity // Require: enough CPU in total
	}
	a := &Alloc{Class: class, R: r}
	if class == C2 {
		if len(h.SharedCPUs()) == 0 {
			return nil, ErrNoCapacity // every core is P1: no cpuset to give
		}
		return a, nil // line 6: SET_CPUSET(c, P2 ∪ P3)
	}
	a.P2 = map[int]int64{}
	whole, frac := r/Milli, r%Milli // line 8
	_, p2, p3 := h.Pools()
	// The shared pool never empties while C2 containers run: cpuset.cpus
	// cannot be empty. With CountShared the capacity check already
	// ensures it; escrad books C2 at 0 and needs the guard.
	// Algorithm 1 does not say which P3 cores: the highest-numbered
	// first, so core 0 (where interrupts and host daemons tend to run,
	// and where our benchmarks pin their clients) stays shared longest.
	slices.Reverse(p3)
	p3 = preferOwn(p3, prev)
	avail := len(p3)
	if h.nC2 > 0 && len(p2) == 0 && avail > 0 {
		avail-- // may still become P2 below: it stays shared
	}
	n1 := min(int(whole), avail) // line 9
	a.P1 = NewCPUSet(p3[:n1]...)
	p3 = p3[n1:]
	switch {
	case int64(n1) != whole: // line 12: missing whole cores
		rem := (whole-int64(n1))*Milli + frac
		if frac == 0 && h.Mode == Hard {
			return nil, ErrNotWYSIWYG // line 14
		}
		n := int((rem + Milli - 1) / Milli)
		if h.Mode == BestEffort {
			n = h.N
		}
		got := h.chooseProcs(p2, n, rem, prev) // line 17
		if got == nil {
			if h.Mode == Hard {
				return nil, ErrNotWYSIWYG // line 19
			}
			return nil, ErrNoCapacity
		}
		a.P2 = got
	case frac != 0: // line 22
		got := h.chooseProcs(p2, 1, frac, prev) // line 23
		if got == nil && len(p3) > 0 {
			got = map[int]int64{p3[0]: frac} // line 25: P3 → P2
		}
		if got == nil && h.Mode == BestEffort {
			got = h.chooseProcs(p2, h.N, frac, prev)
		}
		if got == nil {
			if h.Mode == Hard {
				return nil, ErrNotWYSIWYG // line 27
			}
			return nil, ErrNoCapacity
		}
		a.P2 = got
	}
	return a, nil
}

// preferOwn orders cores: prev's P1 cores first, then its P2 cores, then
// the rest (stable otherwise). Keeping the old P1 cores first is what
// makes every resize orderable: the shared pool before and after then
// always overlap, so no core has to leave a C1 cpuset and join the
// shared one in the same instant (plan).
func preferOwn(cores CPUSet, prev *Alloc) CPUSet {
	out := append(CPUSet(nil), cores...)
	if prev == nil {
		return out
	}
	rank := func(c int) int {
		if prev.P1.Has(c) {
			return 0
		}
		if _, f := prev.P2[c]; f {
			return 1
		}
		return 2
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

// chooseProcs is CHOOSE_PROCS(s, n, r) (Algorithm 1 line 37): at most n
// cores of s that together have r millicores free, or nil. First fit
// over the cores sorted emptiest first (§IV-E: avoid colocating
// fractions), ties to prev's cores, then the lowest number.
func (h *Host) chooseProcs(s CPUSet, n int, r int64, prev *Alloc) map[int]int64 {
	type cand struct {
		c    int
		free int64
		own  bool
	}
	var cs []cand
	for _, c := range s {
		if f := Milli - h.used[c]; f > 0 {
			_, own := prev.p2(c)
			cs = append(cs, cand{c, f, own})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].free != cs[j].free {
			return cs[i].free > cs[j].free
		}
		return cs[i].own && !cs[j].own
	})
	if n == 1 {
		for _, x := range cs {
			if x.free >= r {
				return map[int]int64{x.c: r}
			}
		}
		return nil
	}
	out := map[int]int64{}
	left := r
	for _, x := range cs {
		if left == 0 || len(out) == n {
			break
		}
		take := min(x.free, left)
		out[x.c] = take
		left -= take
	}
	if left > 0 {
		return nil
	}
	return out
}

func (a *Alloc) p2(c int) (int64, bool) {
	if a == nil {
		return 0, false
	}
	v, ok := a.P2[c]
	return v, ok
}
