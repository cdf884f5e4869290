package wysiwyg

import (
	"fmt"
	"sort"
	"strings"
)

// StepKind is what a Step writes.
type StepKind uint8

const (
	// SetCPUs writes a container's cpuset.cpus.
	SetCPUs StepKind = iota + 1
	// SetQuota writes a container's CFS quota.
	SetQuota
)

// Step is one cgroup write.
type Step struct {
	Kind  StepKind
	ID    string
	CPUs  CPUSet // SetCPUs
	Milli int64  // SetQuota: millicores per period
}

func (s Step) String() string {
	if s.Kind == SetCPUs {
		return fmt.Sprintf("%s cpus=%s", s.ID, s.CPUs)
	}
	return fmt.Sprintf("%s quota=%dm", s.ID, s.Milli)
}

// Plan is an ordered list of writes; applied in order, every prefix keeps
// the invariants (see Check).
type Plan []Step

func (p Plan) String() string {
	parts := make([]string, len(p))
	for i, s := range p {
		parts[i] = s.String()
	}
	return strings.Join(parts, "; ")
}

// CPUChanges counts the cpuset writes.
func (p Plan) CPUChanges() int {
	n := 0
	for _, s := range p {
		if s.Kind == SetCPUs {
			n++
		}
	}
	return n
}

type snapshot map[string]CPUSet

func (h *Host) snapshot() snapshot {
	s := make(snapshot, len(h.ctrs))
	for id := range h.ctrs {
		s[id] = h.CPUs(id)
	}
	return s
}

// plan orders the writes from before to the host's current state, where
// only id's allocation changed (quota oldR → newR; 0: absent). The order
// keeps, at every instant:
//   - each P1 core in one cpuset: cores leave the others' cpusets before
//     they join id's, and join the others' only after they left id's;
//   - id sees at least ⌈quota⌉ cores: its cpuset first grows to old ∪
//     new, a quota cut comes before a shrink and a raise after a growth.
func (h *Host) plan(before snapshot, id string, oldR, newR int64) Plan {
	var p Plan
	others := make([]string, 0, len(before))
	for o := range before {
		if o != id {
			others = append(others, o)
		}
	}
	sort.Strings(others)
	after := h.snapshot()
	// 1. the others give up the cores they lose.
	for _, o := range others {
		b, a := before[o], after[o]
		if m := b.Intersect(a); !m.Equal(b) && len(m) > 0 {
			p = append(p, Step{Kind: SetCPUs, ID: o, CPUs: m})
		}
	}
	ob, had := before[id]
	na, has := after[id]
	if !has { // removed: nothing to write to id, its cgroup is going away
		return h.regrow(p, others, before, after)
	}
	if had && newR < oldR {
		p = append(p, Step{Kind: SetQuota, ID: id, Milli: newR})
	}
	u := ob.Union(na)
	if !u.Equal(ob) || !had {
		p = append(p, Step{Kind: SetCPUs, ID: id, CPUs: u})
	}
	if !had || newR > oldR {
		p = append(p, Step{Kind: SetQuota, ID: id, Milli: newR})
	}
	if !na.Equal(u) {
		p = append(p, Step{Kind: SetCPUs, ID: id, CPUs: na})
	}
	return h.regrow(p, others, before, after)
}

// regrow gives the others the cores they gain (last: they were P1 before).
func (h *Host) regrow(p Plan, others []string, before, after snapshot) Plan {
	for _, o := range others {
		b, a := before[o], after[o]
		m := b.Intersect(a)
		if len(m) == 0 || !m.Equal(a) {
			p = append(p, Step{Kind: SetCPUs, ID: o, CPUs: a})
		}
	}
	return p
}
