package session

import "testing"

// Stale generations never overwrite newer ones when updates coalesce.
func TestPushCoalescesByGeneration(t *testing.T) {
	s := &Session{pending: map[uint32]*Update{}, wake: make(chan struct{}, 1)}
	s.Push(Update{Handle: 1, Gen: 5, QuotaUs: 500, PeriodUs: 100000})
	s.Push(Update{Handle: 1, Gen: 4, QuotaUs: 400, MemLimit: 4096})
	s.Push(Update{Handle: 2, Gen: 1, QuotaUs: 7})
	u := s.pending[1]
	if u.Gen != 5 || u.QuotaUs != 500 || u.MemLimit != 4096 || len(s.order) != 2 {
		t.Fatalf("coalesced: %+v order %v", u, s.order)
	}
}
