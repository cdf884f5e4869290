// Package store keeps the controller's desired state — apps with their
// budgets, σ, allocator parameters and policy, and the last deployed spec —
// so that it survives a restart. Only operators' changes are written (a PUT,
// a deploy, a delete); the allocator's 100 ms decisions never are: they are
// rebuilt from the daemons' registrations and telemetry.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/escra-dev/escra/controller/adminapi"
)

// Record is one app's desired state.
type Record struct {
	Spec adminapi.AppSpec `json:"spec"`
	// Deploy is the last spec deployed for the app (nil: budget only).
	Deploy *adminapi.DeployRequest `json:"deploy,omitempty"`
}

// Store holds records by app name. Implementations are safe for
// concurrent use.
type Store interface {
	// List returns every record, by name. Values that do not decode are
	// left out and named in a *BadRecordsError, returned with the rest.
	List(ctx context.Context) ([]Record, error)
	// Get returns the record of name; ok is false when there is none.
	Get(ctx context.Context, name string) (r Record, ok bool, err error)
	// Put creates or replaces r (by r.Spec.Name).
	Put(ctx context.Context, r Record) error
	// Delete removes name's record (no error when there is none).
	Delete(ctx context.Context, name string) error
	// Update reads name's record (exists false: there is none), lets f
	// change it and writes it back unless it was written meanwhile
	// (compare-and-swap on the record's revision; update.go). An error
	// from f aborts with nothing written. prev is the record as it was.
	Update(ctx context.Context, name string, f func(r *Record, exists bool) error) (prev Record, existed bool, err error)
	// Close releases the store (its file lock, its connections).
	Close() error
}

// ErrLocked says another process holds the store.
var ErrLocked = errors.New("store is locked by another process")

func encode(r Record) ([]byte, error) {
	if !adminapi.ValidAppName(r.Spec.Name) {
		return nil, fmt.Errorf("store: bad app name %q", r.Spec.Name)
	}
	return json.Marshal(r)
}

// BadRecord is a stored value that is not its key's record.
type BadRecord struct {
	Key string
	Err error
}

// BadRecordsError is List's error when some stored values do not decode:
// List returns the other records with it, so one bad value (a hand-made
// etcdctl put, a record of a newer version) does not hide every app.
type BadRecordsError struct{ Bad []BadRecord }

func (e *BadRecordsError) Error() string {
	keys := make([]string, len(e.Bad))
	for i, b := range e.Bad {
		keys[i] = b.Key
	}
	return fmt.Sprintf("store: %d undecodable records (%s)", len(e.Bad), strings.Join(keys, ", "))
}

// listed is List's answer: the good records, and the bad ones as a
// *BadRecordsError.
func listed(out []Record, bad []BadRecord) ([]Record, error) {
	if len(bad) > 0 {
		return out, &BadRecordsError{Bad: bad}
	}
	return out, nil
}

func decode(name string, b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("store: record %q: %w", name, err)
	}
	if r.Spec.Name != name {
		return r, fmt.Errorf("store: record %q names app %q", name, r.Spec.Name)
	}
	return r, nil
}

// Memory is a Store in memory: in-process tests and --store none.
type Memory struct {
	mu sync.Mutex
	m  map[string][]byte
	// Writes counts Put and Delete calls (tests check what is written).
	Writes int
	// Refuse, when set, is returned by every write (a test's store that
	// lost its quorum or its leadership).
	Refuse error
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{m: map[string][]byte{}} }

func (s *Memory) List(context.Context) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.m))
	for n := range s.m {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Record, 0, len(names))
	var bad []BadRecord
	for _, n := range names {
		r, err := decode(n, s.m[n])
		if err != nil {
			bad = append(bad, BadRecord{Key: n, Err: err})
			continue
		}
		out = append(out, r)
	}
	return listed(out, bad)
}

func (s *Memory) Get(_ context.Context, name string) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[name]
	if !ok {
		return Record{}, false, nil
	}
	r, err := decode(name, b)
	return r, err == nil, err
}

func (s *Memory) Put(_ context.Context, r Record) error {
	b, err := encode(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Refuse != nil {
		return s.Refuse
	}
	s.m[r.Spec.Name] = b
	s.Writes++
	return nil
}

func (s *Memory) Delete(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Refuse != nil {
		return s.Refuse
	}
	delete(s.m, name)
	s.Writes++
	return nil
}

func (s *Memory) Close() error { return nil }

// WriteCount is the number of writes so far.
func (s *Memory) WriteCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Writes
}
