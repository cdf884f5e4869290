// Package events fans the controller's decisions (limit changes, OOM
// verdicts with reasons) out to admin subscribers. Publishing costs one
// atomic load when nobody listens, so the decision path stays cheap.
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
	n       atomic.Int32
	mu      sync.Mutex
	subs    map[*sub]struct{}
	Dropped atomic.Uint64
}

// Active reports whether anyone listens.
func (h *Hub) Active() bool { return h.n.Load() > 0 }

// Publish delivers e to matching subscribers without blocking.
func (h *Hub) Publish(e Event) {
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
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
	s := &sub{app: app, ch: make(chan Event, 1024)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*sub]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.n.Add(1)
	h.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.n.Add(-1)
			h.mu.Unlock()
		})
	}
}
