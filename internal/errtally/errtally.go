// Package errtally logs a load generator's errors one line each and counts
// them by kind, so a run's summary says what went wrong, not only how
// often (make soak, make bench-controller).
package errtally

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

// Tally is safe for concurrent use.
type Tally struct {
	log      *slog.Logger
	msg      string
	expected map[string]string // kinds a run causes itself, with why; nil: none
	mu       sync.Mutex
	n        map[string]uint64
}

// New logs each error as msg. Kinds in expected are counted apart (and
// the line says expected=true); with expected nil every kind is a finding.
func New(log *slog.Logger, msg string, expected map[string]string) *Tally {
	return &Tally{log: log, msg: msg, expected: expected, n: map[string]uint64{}}
}

// Add counts one error of kind and logs it with ctx (key, value pairs).
func (t *Tally) Add(kind string, err error, ctx ...any) {
	t.mu.Lock()
	t.n[kind]++
	t.mu.Unlock()
	attrs := []any{"kind", kind}
	if t.expected != nil {
		_, exp := t.expected[kind]
		attrs = append(attrs, "expected", exp)
	}
	t.log.Warn(t.msg, append(append(attrs, "err", err), ctx...)...)
}

// Counts returns the counts by kind and the expected and unexpected totals.
func (t *Tally) Counts() (byKind map[string]uint64, expected, unexpected uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	byKind = make(map[string]uint64, len(t.n))
	for k, v := range t.n {
		byKind[k] = v
		if _, ok := t.expected[k]; ok {
			expected += v
		} else {
			unexpected += v
		}
	}
	return byKind, expected, unexpected
}

// Line is "kind n, kind n" sorted by kind ("none" when empty).
func Line(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
