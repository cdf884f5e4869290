package allocator

import "sort"

// a.order is sorted by Key, whose high half is the member's host, so the
// members of one host are one run of it, and the runs come in host order:
// the per-period lease and credit rounds walk the runs instead of
// grouping members in a map each period.

// nextRun is the run of a.order that starts at i: its host and its end.
func (a *Books) nextRun(i int) (HostID, int) {
	h := a.order[i].Host()
	j := i + 1
	for j < len(a.order) && a.order[j].Host() == h {
		j++
	}
	return h, j
}

// hasMembers reports whether host h has members.
func (a *Books) hasMembers(h HostID) bool {
	i := sort.Search(len(a.order), func(i int) bool { return a.order[i].Host() >= h })
	return i < len(a.order) && a.order[i].Host() == h
}
