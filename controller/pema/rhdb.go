package pema

import (
	"encoding/json"
	"fmt"
	"sync"
)

// Entry is one RHDb row (Alg. 1 line 3): the allocation in force during
// interval T, what it gave, and the thresholds then.
type Entry struct {
	T       int       `json:"t"`
	X       []float64 `json:"x"`
	R       float64   `json:"r"`
	RPS     float64   `json:"rps"`
	Uth     []float64 `json:"uth"`
	Hth     []float64 `json:"hth"`
	Violate bool      `json:"violate"`
	// U: the utilisation observed (pema-guarded only: its fit needs it).
	U []float64 `json:"u,omitempty"`
}

// RHDb is the resource-allocation history database (§3.3).
type RHDb interface {
	Append(e Entry) error
	Entries() ([]Entry, error)
}

// MemDB is an RHDb in memory.
type MemDB struct {
	mu sync.Mutex
	es []Entry
}

// NewMemDB returns an empty MemDB.
func NewMemDB() *MemDB { return &MemDB{} }

func (m *MemDB) Append(e Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.es = append(m.es, e)
	return nil
}

func (m *MemDB) Entries() ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Entry(nil), m.es...), nil
}

// Log is an append-only byte log (the controller's bbolt store provides
// one per bucket).
type Log interface {
	Append(v []byte) error
	All() ([][]byte, error)
}

// LogDB is an RHDb written through to a Log, read from memory: a rollback
// never waits for the disk. Entries already in the log are loaded.
type LogDB struct {
	mem MemDB
	log Log
}

// NewLogDB opens an RHDb on l.
func NewLogDB(l Log) (*LogDB, error) {
	d := &LogDB{log: l}
	all, err := l.All()
	if err != nil {
		return nil, err
	}
	for i, b := range all {
		var e Entry
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("rhdb entry %d: %w", i, err)
		}
		d.mem.es = append(d.mem.es, e)
	}
	return d, nil
}

func (d *LogDB) Append(e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := d.log.Append(b); err != nil {
		return err
	}
	return d.mem.Append(e)
}

func (d *LogDB) Entries() ([]Entry, error) { return d.mem.Entries() }

// copyInto appends src's entries to dst (a range split hands the parent's
// history to the child).
func copyInto(dst, src RHDb) error {
	es, err := src.Entries()
	if err != nil {
		return err
	}
	for _, e := range es {
		if err := dst.Append(e); err != nil {
			return err
		}
	}
	return nil
}
