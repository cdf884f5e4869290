package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Log is an append-only log of records in the controller's store: the
// pema policy keeps its RHDb (PEMA §3.3) in one per app and workload
// range, in the same bbolt file as the apps.
type Log interface {
	Append(v []byte) error
	All() ([][]byte, error)
}

// Logger is a store that can hold logs.
type Logger interface {
	Log(name string) (Log, error)
}

type boltLog struct {
	db     *bolt.DB
	bucket []byte
}

// Log opens (creating) the log called name.
func (s *Bolt) Log(name string) (Log, error) {
	if name == "" || len(name) > 200 {
		return nil, fmt.Errorf("store: log name %q: want 1-200 bytes", name)
	}
	b := []byte("log/" + name)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(b)
		return err
	}); err != nil {
		return nil, err
	}
	return &boltLog{db: s.db, bucket: b}, nil
}

func (l *boltLog) Append(v []byte) error {
	return l.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(l.bucket)
		if bk == nil {
			return errors.New("store: log bucket gone")
		}
		seq, err := bk.NextSequence()
		if err != nil {
			return err
		}
		return bk.Put(binary.BigEndian.AppendUint64(nil, seq), v)
	})
}

func (l *boltLog) All() ([][]byte, error) {
	var out [][]byte
	err := l.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(l.bucket)
		if bk == nil {
			return nil
		}
		return bk.ForEach(func(_, v []byte) error {
			out = append(out, append([]byte(nil), v...))
			return nil
		})
	})
	return out, err
}
