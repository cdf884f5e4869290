package wysiwyg

import (
	"fmt"
	"sort"
)

// View is what the cgroup files of a host say at one instant: each
// container's class, cpuset and quota (millicores; <= 0: unlimited).
type View struct {
	Class map[string]Class
	CPUs  map[string]CPUSet
	Milli map[string]int64
}

// NewView is an empty view.
func NewView() View {
	return View{Class: map[string]Class{}, CPUs: map[string]CPUSet{}, Milli: map[string]int64{}}
}

// Apply applies one step to the view (a model of the cgroup files).
func (v View) Apply(s Step) {
	switch s.Kind {
	case SetCPUs:
		v.CPUs[s.ID] = s.CPUs
	case SetQuota:
		v.Milli[s.ID] = s.Milli
	}
}

// Check returns the invariants the view breaks, read from the files alone
// (escrad's sampler uses it on real cgroups):
//   - no cpuset is empty;
//   - a C1 container sees at least ⌈quota⌉ cores;
//   - the cores of C1 containers that are also in another cpuset (P2)
//     carry at most one core of C1 quota each: Σ over C1 of (quota − its
//     exclusive cores) ≤ the shared cores they see, in total and per
//     container (the per-core bound of §IV-B summed: the files do not
//     say how a quota splits over cores);
//   - a core of p1 (core → owner, from the allocator's state), while its
//     owner sees it and has that state's quota r (nil: any), is in no
//     other cpuset.
func (v View) Check(p1 map[int]string, r map[string]int64) []string {
	var bad []string
	ids := make([]string, 0, len(v.CPUs))
	for id := range v.CPUs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	in := map[int][]string{}
	for _, id := range ids {
		for _, c := range v.CPUs[id] {
			in[c] = append(in[c], id)
		}
	}
	var need int64
	shared := map[int]bool{}
	for _, id := range ids {
		s := v.CPUs[id]
		if len(s) == 0 {
			bad = append(bad, fmt.Sprintf("%s: empty cpuset", id))
			continue
		}
		if v.Class[id] != C1 {
			continue
		}
		q := v.Milli[id]
		if q <= 0 {
			continue // unlimited: nothing to see
		}
		if k := (q + Milli - 1) / Milli; int64(len(s)) < k {
			bad = append(bad, fmt.Sprintf("%s: sees %d cores for a quota of %dm", id, len(s), q))
		}
		var excl, sh int64
		for _, c := range s {
			if len(in[c]) == 1 {
				excl++
			} else {
				sh++
				shared[c] = true
			}
		}
		if n := q - excl*Milli; n > 0 {
			if n > sh*Milli {
				bad = append(bad, fmt.Sprintf("%s: %dm of quota on %d shared cores", id, n, sh))
			}
			need += n
		}
	}
	if need > int64(len(shared))*Milli {
		bad = append(bad, fmt.Sprintf("C1 quota on shared cores %dm > %d cores", need, len(shared)))
	}
	cores := make([]int, 0, len(p1))
	for c := range p1 {
		cores = append(cores, c)
	}
	sort.Ints(cores)
	for _, c := range cores {
		o := p1[c]
		if !v.CPUs[o].Has(c) || r != nil && v.Milli[o] != r[o] {
			continue // in transit: the owner's files are not at that state yet
		}
		for _, id := range in[c] {
			if id != p1[c] {
				bad = append(bad, fmt.Sprintf("P1 core %d of %s is also in %s's cpuset", c, p1[c], id))
			}
		}
	}
	return bad
}

// Quotas maps each container to its allocation (millicores).
func (h *Host) Quotas() map[string]int64 {
	m := make(map[string]int64, len(h.ctrs))
	for id, a := range h.ctrs {
		m[id] = a.R
	}
	return m
}

// P1 maps each P1 core to its owner.
func (h *Host) P1() map[int]string {
	m := map[int]string{}
	for c, o := range h.owner {
		if o != "" {
			m[c] = o
		}
	}
	return m
}

// Validate checks the host's own bookkeeping: the pools partition the
// cores, each P1 core is in exactly one C1 allocation, P2 bookings sum to
// at most a core, and (principle-hard) every C1 sees ⌈r⌉ cores.
func (h *Host) Validate() error {
	owner := make([]string, h.N)
	used := make([]int64, h.N)
	nfrac := make([]int, h.N)
	var total int64
	for _, id := range h.IDs() {
		a := h.ctrs[id]
		if h.counts(a) {
			total += a.R
		}
		if a.Class == C2 {
			continue
		}
		var sum int64
		for _, c := range a.P1 {
			if owner[c] != "" {
				return fmt.Errorf("core %d is P1 of %s and %s", c, owner[c], id)
			}
			owner[c] = id
			sum += Milli
		}
		for c, x := range a.P2 {
			if x <= 0 {
				return fmt.Errorf("%s: empty fraction on core %d", id, c)
			}
			used[c] += x
			nfrac[c]++
			sum += x
		}
		if sum != a.R {
			return fmt.Errorf("%s: cores hold %dm, allocation %dm", id, sum, a.R)
		}
		if k := int((a.R + Milli - 1) / Milli); h.Mode == Hard && len(a.CPUs()) != k {
			return fmt.Errorf("%s: sees %d cores for %dm (principle-hard)", id, len(a.CPUs()), a.R)
		}
	}
	for c := 0; c < h.N; c++ {
		if owner[c] != h.owner[c] || used[c] != h.used[c] || nfrac[c] != h.nfrac[c] {
			return fmt.Errorf("core %d: bookkeeping drifted", c)
		}
		if owner[c] != "" && nfrac[c] > 0 {
			return fmt.Errorf("core %d is both P1 and P2", c)
		}
		if used[c] > Milli {
			return fmt.Errorf("P2 core %d carries %dm", c, used[c])
		}
	}
	if total != h.total {
		return fmt.Errorf("booked %dm, counted %dm", h.total, total)
	}
	if total > int64(h.N)*Milli {
		return fmt.Errorf("booked %dm on %d cores", total, h.N)
	}
	if h.nC2 > 0 && len(h.SharedCPUs()) == 0 {
		return fmt.Errorf("shared pool empty with %d C2 containers", h.nC2)
	}
	return nil
}

// CheckExclusive is the P1 invariant read from the files alone: each C1
// container has at least ⌊quota⌋ cores in no other cpuset. It holds for
// principle-hard hosts whose C1 containers all got their whole cores from
// P3 (Algorithm 1 lines 9-10); line 15's case (whole cores spread on P2
// when P3 ran out) breaks it by design, so use it where that cannot occur.
func (v View) CheckExclusive() []string {
	in := map[int]int{}
	for _, s := range v.CPUs {
		for _, c := range s {
			in[c]++
		}
	}
	var bad []string
	ids := make([]string, 0, len(v.CPUs))
	for id := range v.CPUs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if v.Class[id] != C1 || v.Milli[id] <= 0 {
			continue
		}
		var excl int64
		for _, c := range v.CPUs[id] {
			if in[c] == 1 {
				excl++
			}
		}
		if w := v.Milli[id] / Milli; excl < w {
			bad = append(bad, fmt.Sprintf("%s: %d exclusive cores for a quota of %dm", id, excl, v.Milli[id]))
		}
	}
	return bad
}
