// Package events fans the controller's decisions (limit changes, OOM
// verdicts with reasons) out to admin subscribers, and keeps the latest
// ones in memory for escractl events --since. Publishing costs one
// atomic load when history is off and nobody listens; with history (the
// default) one short critical section per event.
package events

import (
	"sync"
	"sync/atomic"
	"time"
)

// Event is one decision.
type Event struct {
	Time        time.Time `json:"time"`
	App         string    `json:"app"`
	Host        string    `json:"host,omitempty"`
	ContainerID string    `json:"container_id,omitempty"`
	Handle      uint32    `json:"handle"`
	Kind        string    `json:"kind"` // "limits", "oom-verdict", "reclaim", "join", "leave"
	Generation  uint64    `json:"generation,omitempty"`
	CPUQuotaUs  int64     `json:"cpu_quota_us,omitempty"`
	MemoryBytes int64     `json:"memory_limit_bytes,omitempty"`
	Granted     *bool     `json:"granted,omitempty"`
	Reason      string    `json:"reason,omitempty"`
}

type sub struct {
	app string
	ch  chan Event
}

// Hub broadcasts events; slow subscribers lose events (counted), never
// block the allocator.
type Hub struct {
	n       atomic.Int32 // subscribers, +1 while history is kept
	mu      sync.Mutex
	subs    map[*sub]struct{}
	Dropped atomic.Uint64
	// Two rings: limit changes come every period per busy container and
	// would push the rarer joins, leaves, OOM verdicts and reclaims out.
	limits, other ring
	keep          bool
}

// DefaultHistory is how many events of each ring a hub keeps.
const DefaultHistory = 10000

// ring is a fixed-size circular buffer of events in publish order.
type ring struct {
	buf  []Event
	next int
	full bool
}

func (r *ring) add(e Event) {
	r.buf[r.next] = e
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// each calls f on the events oldest first.
func (r *ring) each(f func(Event)) {
	if r.full {
		for _, e := range r.buf[r.next:] {
			f(e)
		}
	}
	for _, e := range r.buf[:r.next] {
		f(e)
	}
}

// Keep makes the hub remember the last n events of each kind group (limit
// changes; everything else) for Since. Call it once, before publishing.
func (h *Hub) Keep(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n <= 0 || h.keep {
		return
	}
	h.limits.buf, h.other.buf = make([]Event, n), make([]Event, n)
	h.keep = true
	h.n.Add(1)
}

// Active reports whether anyone listens or history is kept.
func (h *Hub) Active() bool { return h.n.Load() > 0 }

// Publish delivers e to matching subscribers without blocking.
func (h *Hub) Publish(e Event) {
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keep {
		if e.Kind == "limits" {
			h.limits.add(e)
		} else {
			h.other.add(e)
		}
	}
	for s := range h.subs {
		if s.app != "" && s.app != e.App {
			continue
		}
		select {
		case s.ch <- e:
		default:
			h.Dropped.Add(1)
		}
	}
}

// Subscribe returns a channel of events for app ("" = all) and a cancel.
func (h *Hub) Subscribe(app string) (<-chan Event, func()) {
	_, ch, cancel := h.SubscribeSince(app, time.Time{})
	return ch, cancel
}

// SubscribeSince returns the kept events of app ("" = all) later than
// since (none for a zero since), oldest first, and a subscription that
// starts right after them: no event is lost or shown twice in between.
func (h *Hub) SubscribeSince(app string, since time.Time) ([]Event, <-chan Event, func()) {
	s := &sub{app: app, ch: make(chan Event, 1024)}
	h.mu.Lock()
	var past []Event
	if !since.IsZero() {
		past = h.since(app, since)
	}
	if h.subs == nil {
		h.subs = map[*sub]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.n.Add(1)
	h.mu.Unlock()
	var once sync.Once
	return past, s.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.n.Add(-1)
			h.mu.Unlock()
		})
	}
}

// Since returns the kept events of app ("" = all) later than t, oldest first.
func (h *Hub) Since(app string, t time.Time) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since(app, t)
}

func (h *Hub) since(app string, t time.Time) []Event {
	if !h.keep {
		return nil
	}
	var a, b []Event
	pick := func(dst *[]Event) func(Event) {
		return func(e Event) {
			if e.Time.After(t) && (app == "" || e.App == app) {
				*dst = append(*dst, e)
			}
		}
	}
	h.limits.each(pick(&a))
	h.other.each(pick(&b))
	// Merge the two rings by time (each is in publish order).
	out := make([]Event, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if b[0].Time.Before(a[0].Time) {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}
