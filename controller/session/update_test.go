package session

import "testing"

// Stale generations never overwrite newer ones when updates coalesce.
func TestPushCoalescesByGeneration(t *testing.T) {
	s := &Session{pending: map[uint32]int{}, wake: make(chan struct{}, 1)}
	s.Push(Update{Handle: 1, Gen: 5, QuotaUs: 500, PeriodUs: 100000})
	s.Push(Update{Handle: 1, Gen: 4, QuotaUs: 400, MemLimit: 4096})
	s.Push(Update{Handle: 2, Gen: 1, QuotaUs: 7})
	u := s.queue[s.pending[1]]
	if u.Gen != 5 || u.QuotaUs != 500 || u.MemLimit != 4096 || len(s.queue) != 2 || s.queue[1].Handle != 2 {
		t.Fatalf("coalesced: %+v queue %+v", u, s.queue)
	}
}

type ackRec struct{ got []uint64 }

func (a *ackRec) Applied(key, gen uint64, err error) { a.got = append(a.got, key, gen) }

// A coalesced update answers every caller with its own key and generation.
func TestCoalescedUpdatesAnswerEachCaller(t *testing.T) {
	s := &Session{pending: map[uint32]int{}, wake: make(chan struct{}, 1)}
	a := &ackRec{}
	var cb []error
	s.Queue(Update{Handle: 1, Gen: 4, QuotaUs: 400, Acker: a, AckKey: 9})
	s.Queue(Update{Handle: 1, Gen: 5, MemLimit: 4096, Acker: a, AckKey: 9, OnApplied: func(err error) { cb = append(cb, err) }})
	u := s.queue[s.pending[1]]
	u.Done(nil)
	if len(a.got) != 4 || a.got[0] != 9 || a.got[1] != 4 || a.got[3] != 5 || len(cb) != 1 {
		t.Fatalf("acks %v callbacks %v", a.got, cb)
	}
}
