// Package ratelog limits log lines about bad input to one per second per
// source, so a misbehaving peer cannot flood the log.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter remembers when each source last logged.
type Limiter struct {
	mu   sync.Mutex
	last map[string]time.Time
	Log  *slog.Logger
}

// New returns a limiter logging to l (nil: slog.Default()).
func New(l *slog.Logger) *Limiter {
	if l == nil {
		l = slog.Default()
	}
	return &Limiter{last: map[string]time.Time{}, Log: l}
}

// Warn logs msg for source unless that source logged within the last second.
func (l *Limiter) Warn(source, msg string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	if t, ok := l.last[source]; ok && now.Sub(t) < time.Second {
		l.mu.Unlock()
		return
	}
	if len(l.last) > 4096 { // many sources: forget, keep memory bounded
		clear(l.last)
	}
	l.last[source] = now
	l.mu.Unlock()
	l.Log.Warn(msg, append([]any{"source", source}, args...)...)
}
