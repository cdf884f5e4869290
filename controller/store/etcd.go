package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// DefaultEtcdPrefix is where the controllers keep their keys in etcd.
const DefaultEtcdPrefix = "/escra/"

// ErrNotLeader says a write was refused: this controller no longer leads
// (its fence, the leader key it created, is gone).
var ErrNotLeader = errors.New("not the leader")

// ParseEtcdURL turns etcd://HOST:PORT[,HOST:PORT…] into client endpoints.
func ParseEtcdURL(s string) ([]string, error) {
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok || rest == "" {
		return nil, fmt.Errorf("%q: want etcd://HOST:PORT[,HOST:PORT...]", s)
	}
	var eps []string
	for _, hp := range strings.Split(rest, ",") {
		if _, _, err := net.SplitHostPort(hp); err != nil {
			return nil, fmt.Errorf("%q: %v", hp, err)
		}
		eps = append(eps, "http://"+hp)
	}
	return eps, nil
}

// Etcd keeps records in etcd under prefix+"apps/" and runs the leader
// election under prefix+"leader". While this controller leads, every
// write is fenced by its leader key: a deposed leader's late write fails
// instead of overwriting its successor's.
type Etcd struct {
	cli    *clientv3.Client
	prefix string

	mu    sync.Mutex
	fence []clientv3.Cmp            // nil: not leading (reads only)
	until atomic.Pointer[time.Time] // the lease's deadline (lease.go); nil: none held
}

// EtcdTLS is the client side of etcd's own TLS (etcd --trusted-ca-file,
// --cert-file, --key-file, --client-cert-auth): etcd's certificate must
// chain to ca; cert and key (both or neither) are this controller's client
// certificate, which etcd asks for under --client-cert-auth. The flags
// mirror etcdctl's --cacert, --cert and --key.
func EtcdTLS(ca, cert, key string) (*tls.Config, error) {
	if ca == "" {
		return nil, errors.New("etcd TLS: a CA file is needed to check etcd's certificate")
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("etcd TLS: give both a client certificate and its key, or neither")
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("etcd TLS: %s holds no PEM certificate", ca)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: certificate %s / key %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// OpenEtcd connects and checks that etcd answers. With tlsCfg (EtcdTLS)
// the endpoints are dialled over HTTPS.
func OpenEtcd(endpoints []string, prefix string, tlsCfg *tls.Config) (*Etcd, error) {
	if tlsCfg != nil {
		eps := make([]string, len(endpoints))
		for i, e := range endpoints {
			eps[i] = "https://" + strings.TrimPrefix(e, "http://")
		}
		endpoints = eps
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second,
		TLS: tlsCfg, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, prefix+"apps/", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %s did not answer within 3 s: %w", strings.Join(endpoints, ","), err)
	}
	return &Etcd{cli: cli, prefix: prefix}, nil
}

func (s *Etcd) key(name string) string { return s.prefix + "apps/" + name }

func (s *Etcd) List(ctx context.Context) ([]Record, error) {
	resp, err := s.cli.Get(ctx, s.prefix+"apps/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(resp.Kvs))
	var bad []BadRecord
	for _, kv := range resp.Kvs {
		r, err := decode(strings.TrimPrefix(string(kv.Key), s.prefix+"apps/"), kv.Value)
		if err != nil {
			bad = append(bad, BadRecord{Key: string(kv.Key), Err: err})
			continue
		}
		out = append(out, r)
	}
	return listed(out, bad)
}

func (s *Etcd) Get(ctx context.Context, name string) (Record, bool, error) {
	resp, err := s.cli.Get(ctx, s.key(name))
	if err != nil || len(resp.Kvs) == 0 {
		return Record{}, false, err
	}
	r, err := decode(name, resp.Kvs[0].Value)
	return r, err == nil, err
}

func (s *Etcd) Put(ctx context.Context, r Record) error {
	b, err := encode(r)
	if err != nil {
		return err
	}
	return s.write(ctx, clientv3.OpPut(s.key(r.Spec.Name), string(b)))
}

func (s *Etcd) Delete(ctx context.Context, name string) error {
	return s.write(ctx, clientv3.OpDelete(s.key(name)))
}

// write commits op if this controller still leads (a store opened without
// an election, such as a test's, writes unfenced).
func (s *Etcd) write(ctx context.Context, op clientv3.Op) error {
	s.mu.Lock()
	fence := s.fence
	s.mu.Unlock()
	resp, err := s.cli.Txn(ctx).If(fence...).Then(op).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return ErrNotLeader
	}
	return nil
}

func (s *Etcd) Close() error { return s.cli.Close() }

// Campaign blocks until this controller leads or ctx ends. value is what
// others learn of the leader (Leader). term is the election revision of
// the win: it grows with every new leader. lost is closed when the
// leadership ends: at once when the lease was not renewed within its TTL
// (etcd unreachable or the lease expired), after resigning (the lease
// revoked, so a successor wins without waiting) when ctx ended. Writes
// are fenced from now on.
func (s *Etcd) Campaign(ctx context.Context, value string, ttl time.Duration) (term uint64, lost <-chan struct{}, err error) {
	secs := max(int64((ttl+time.Second-1)/time.Second), 1)
	granted := time.Now()
	lease, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return 0, nil, err
	}
	// etcd may grant more than asked (its minimum TTL): hold to its TTL.
	life := time.Duration(lease.TTL) * time.Second
	lctx, cancel := context.WithCancel(ctx)
	sess, err := concurrency.NewSession(s.cli, concurrency.WithLease(lease.ID), concurrency.WithContext(lctx))
	if err != nil {
		cancel()
		return 0, nil, err
	}
	done := make(chan struct{})
	go s.holdLease(lctx, lease.ID, granted, life, done)
	e := concurrency.NewElection(sess, s.prefix+"leader")
	cerr := make(chan error, 1)
	go func() { cerr <- e.Campaign(lctx, value) }()
	select {
	case err = <-cerr:
	case <-done:
		err = errors.New("etcd lease lost while campaigning")
	}
	if err != nil {
		cancel()
		s.cli.Revoke(context.Background(), lease.ID)
		return 0, nil, err
	}
	s.mu.Lock()
	s.fence = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())}
	s.mu.Unlock()
	out := make(chan struct{})
	go func() {
		<-done
		s.mu.Lock()
		s.fence = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", -1)} // never true
		s.mu.Unlock()
		resigning := ctx.Err() != nil
		cancel()
		if !resigning {
			close(out) // lost: say so now, not after a revoke that may hang
		}
		// Let a successor win at once when etcd is still reachable.
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		s.cli.Revoke(rctx, lease.ID)
		rcancel()
		if resigning {
			close(out) // resigned: the key is gone when the caller goes on
		}
	}()
	return uint64(e.Rev()), out, nil
}

// Leader returns the current leader's value ("" when none is elected).
func (s *Etcd) Leader(ctx context.Context) (string, error) {
	resp, err := s.cli.Get(ctx, s.prefix+"leader/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}
