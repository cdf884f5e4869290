package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DefaultDir is where the controller keeps its state unless told
// (--state-dir; the packaged unit's StateDirectory=escra).
const DefaultDir = "/var/lib/escra"

// FileName is the bbolt file in the state directory.
const FileName = "controller.db"

var appsBucket = []byte("apps")

// Bolt is the embedded file store: one bbolt file, one bucket of JSON
// records keyed by app name. bbolt flocks the file, so a second controller
// on the same directory is refused instead of sharing it.
type Bolt struct {
	db *bolt.DB
}

// OpenBolt opens (creating) dir/controller.db.
func OpenBolt(dir string) (*Bolt, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w (another escra-controller uses this --state-dir)", path, ErrLocked)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(appsBucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// Path is the file's path.
func (s *Bolt) Path() string { return s.db.Path() }

func (s *Bolt) List(context.Context) ([]Record, error) {
	var out []Record
	var bad []BadRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(appsBucket).ForEach(func(k, v []byte) error {
			r, err := decode(string(k), v)
			if err != nil {
				bad = append(bad, BadRecord{Key: string(k), Err: err})
				return nil
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return listed(out, bad)
}

func (s *Bolt) Get(_ context.Context, name string) (Record, bool, error) {
	var r Record
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(appsBucket).Get([]byte(name))
		if v == nil {
			return nil
		}
		var err error
		r, err = decode(name, v)
		ok = err == nil
		return err
	})
	return r, ok, err
}

// Put commits before it returns (bbolt fsyncs each transaction), so an
// answered PUT survives a SIGKILL right after.
func (s *Bolt) Put(_ context.Context, r Record) error {
	b, err := encode(r)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(appsBucket).Put([]byte(r.Spec.Name), b)
	})
}

func (s *Bolt) Delete(_ context.Context, name string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(appsBucket).Delete([]byte(name))
	})
}

func (s *Bolt) Close() error { return s.db.Close() }
