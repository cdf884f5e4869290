package session

// Update is one container's new limits. Zero fields stay unchanged.
type Update struct {
	Handle   uint32
	Gen      uint64
	QuotaUs  int64
	PeriodUs uint32
	MemLimit int64
	Received int64 // unix ns of the telemetry that caused it (0: none)
	// Acker, when set, is told Applied(AckKey, Gen, err) once the daemon
	// acked (or failed): unlike a closure per update it costs no
	// allocation on the per-period path. OnApplied is called after it.
	Acker     Acker
	AckKey    uint64
	OnApplied func(err error)
	merged    []ackTo // callbacks of older, coalesced updates
}

// Acker takes the daemon's answer to update gen of the container the
// caller named key.
type Acker interface {
	Applied(key, gen uint64, err error)
}

// ackTo is whom an update's answer goes to.
type ackTo struct {
	acker Acker
	key   uint64
	gen   uint64
	cb    func(err error)
}

func (a ackTo) call(err error) {
	if a.acker != nil {
		a.acker.Applied(a.key, a.gen, err)
	}
	if a.cb != nil {
		a.cb(err)
	}
}

func (a ackTo) set() bool { return a.acker != nil || a.cb != nil }

func (u *Update) ackTo() ackTo { return ackTo{u.Acker, u.AckKey, u.Gen, u.OnApplied} }

// Done answers u's callbacks with err (for fakes of a session in tests).
func (u *Update) Done(err error) {
	for _, a := range u.merged {
		a.call(err)
	}
	u.ackTo().call(err)
}

// Push queues an update and wakes the writer.
func (s *Session) Push(u Update) {
	s.Queue(u)
	s.poke()
}

// Queue adds an update without waking the writer. Updates for one handle coalesce: the newest
// generation wins field by field, so a stale update never overwrites a newer one.
func (s *Session) Queue(u Update) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		u.Done(ErrClosed)
		return
	}
	if i, ok := s.pending[u.Handle]; ok {
		prev := &s.queue[i]
		newer, older := u, *prev
		if newer.Gen < older.Gen {
			newer, older = older, newer
		}
		if newer.QuotaUs == 0 {
			newer.QuotaUs, newer.PeriodUs = older.QuotaUs, older.PeriodUs
		}
		if newer.MemLimit == 0 {
			newer.MemLimit = older.MemLimit
		}
		if newer.Received == 0 || (older.Received != 0 && older.Received < newer.Received) {
			newer.Received = older.Received
		}
		newer.merged = append(append(newer.merged, older.merged...), older.ackTo())
		if !older.ackTo().set() {
			newer.merged = newer.merged[:len(newer.merged)-1]
		}
		*prev = newer
	} else {
		s.pending[u.Handle] = len(s.queue)
		s.queue = append(s.queue, u)
	}
	s.mu.Unlock()
}
