package store

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrConflict says a record kept changing under a read-modify-write.
var ErrConflict = errors.New("store: the record changed while it was updated; try again")

// Update of Memory holds its lock from the read to the write.
func (s *Memory) Update(_ context.Context, name string, f func(r *Record, exists bool) error) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok, err := s.getLocked(name)
	if err != nil {
		return prev, ok, err
	}
	r := prev
	if err := f(&r, ok); err != nil {
		return prev, ok, err
	}
	if s.Refuse != nil {
		return prev, ok, s.Refuse
	}
	b, err := encode(r)
	if err != nil {
		return prev, ok, err
	}
	s.m[name] = b
	s.Writes++
	return prev, ok, nil
}

// getLocked is name's record; one that does not decode is absent to
// Update, so applying the app again replaces it (List names it).
func (s *Memory) getLocked(name string) (Record, bool, error) {
	b, ok := s.m[name]
	if !ok {
		return Record{}, false, nil
	}
	r, err := decode(name, b)
	if err != nil {
		return Record{}, false, nil
	}
	return r, true, nil
}

// Update of Bolt reads and writes in one transaction (bbolt serialises
// writers).
func (s *Bolt) Update(_ context.Context, name string, f func(r *Record, exists bool) error) (Record, bool, error) {
	var prev Record
	var ok bool
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(appsBucket)
		if v := bk.Get([]byte(name)); v != nil {
			if r, err := decode(name, v); err == nil { // a bad record is replaced
				prev, ok = r, true
			}
		}
		r := prev
		if err := f(&r, ok); err != nil {
			return err
		}
		b, err := encode(r)
		if err != nil {
			return err
		}
		return bk.Put([]byte(name), b)
	})
	return prev, ok, err
}

// A record that does not decode is absent to Update (List names it): the
// app applied again replaces it.

// Update of Etcd commits only while the record's ModRevision is the one
// read (and this controller still leads); a concurrent writer makes it
// read again, up to three times.
func (s *Etcd) Update(ctx context.Context, name string, f func(r *Record, exists bool) error) (Record, bool, error) {
	key := s.key(name)
	for range 3 {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return Record{}, false, err
		}
		var prev Record
		var rev int64 // 0: absent (etcd's ModRevision of a missing key)
		ok := len(resp.Kvs) > 0
		if ok {
			rev = resp.Kvs[0].ModRevision
			if prev, err = decode(name, resp.Kvs[0].Value); err != nil {
				prev, ok = Record{}, false // a bad record is replaced, still compare-and-swap
			}
		}
		r := prev
		if err := f(&r, ok); err != nil {
			return prev, ok, err
		}
		b, err := encode(r)
		if err != nil {
			return prev, ok, err
		}
		s.mu.Lock()
		cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, s.fence...)
		s.mu.Unlock()
		tr, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return prev, ok, err
		}
		if tr.Succeeded {
			return prev, ok, nil
		}
		now, err := s.cli.Get(ctx, key)
		if err != nil {
			return prev, ok, err
		}
		unchanged := (len(now.Kvs) == 0 && rev == 0) || (len(now.Kvs) > 0 && now.Kvs[0].ModRevision == rev)
		if unchanged {
			return prev, ok, ErrNotLeader // the revision held: the fence failed
		}
	}
	return Record{}, false, fmt.Errorf("%w (%s)", ErrConflict, name)
}
