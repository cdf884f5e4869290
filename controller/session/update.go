package session

// Update is one container's new limits. Zero fields stay unchanged.
type Update struct {
	Handle    uint32
	Gen       uint64
	QuotaUs   int64
	PeriodUs  uint32
	MemLimit  int64
	Received  int64             // unix ns of the telemetry that caused it (0: none)
	OnApplied func(err error)   // called once the daemon acked (or failed)
	merged    []func(err error) // callbacks of older, coalesced updates
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
		if u.OnApplied != nil {
			u.OnApplied(ErrClosed)
		}
		return
	}
	if prev, ok := s.pending[u.Handle]; ok {
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
		newer.merged = append(append(newer.merged, older.merged...), older.OnApplied)
		if older.OnApplied == nil {
			newer.merged = newer.merged[:len(newer.merged)-1]
		}
		s.pending[u.Handle] = &newer
	} else {
		nu := u
		s.pending[u.Handle] = &nu
		s.order = append(s.order, u.Handle)
	}
	s.mu.Unlock()
}
