package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/etcdtest"
)

func openEtcd(t *testing.T, e *etcdtest.Etcd) *Etcd {
	t.Helper()
	eps, err := ParseEtcdURL(e.URL())
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenEtcd(eps, DefaultEtcdPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Records round-trip through a real etcd; one controller leads at a time,
// terms grow, the follower learns the leader's value, and a deposed
// leader's writes are refused (fenced by its leader key).
func TestEtcdRecordsElectionAndFence(t *testing.T) {
	e := etcdtest.Start(t)
	a, b := openEtcd(t, e), openEtcd(t, e)
	ctx := context.Background()
	web := Record{Spec: adminapi.AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}}
	if err := a.Put(ctx, web); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := b.Get(ctx, "web"); err != nil || !ok || r.Spec.CPUCores != 2 {
		t.Fatalf("get from the other client: %+v %v %v", r, ok, err)
	}

	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	termA, lostA, err := a.Campaign(actx, "A", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := b.Leader(ctx); err != nil || v != "A" {
		t.Fatalf("leader seen by b: %q %v", v, err)
	}
	won := make(chan uint64, 1)
	go func() {
		term, _, err := b.Campaign(ctx, "B", 2*time.Second)
		if err == nil {
			won <- term
		}
	}()
	select {
	case <-won:
		t.Fatal("two leaders at once")
	case <-time.After(500 * time.Millisecond):
	}
	if err := a.Put(ctx, web); err != nil {
		t.Fatalf("leader's write: %v", err)
	}
	acancel() // a steps down
	<-lostA
	var termB uint64
	select {
	case termB = <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("b never took over")
	}
	if termB <= termA {
		t.Fatalf("term %d after %d: terms must grow", termB, termA)
	}
	if err := a.Put(ctx, web); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("deposed leader's write: %v, want ErrNotLeader", err)
	}
	if err := b.Delete(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if all, err := a.List(ctx); err != nil || len(all) != 0 {
		t.Fatalf("after delete: %v %v", all, err)
	}
}

func TestParseEtcdURL(t *testing.T) {
	if eps, err := ParseEtcdURL("etcd://127.0.0.1:2379,127.0.0.2:2379"); err != nil || len(eps) != 2 || eps[1] != "http://127.0.0.2:2379" {
		t.Fatalf("%v %v", eps, err)
	}
	for _, bad := range []string{"etcd://", "http://x:1", "etcd://nohost"} {
		if _, err := ParseEtcdURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// etcd's own TLS with client certificates (etcd --client-cert-auth): a
// controller with the CA and its client certificate keeps records there;
// one without a client certificate, or speaking plain HTTP, is refused at
// open, in one error, and nothing is written.
func TestEtcdTLS(t *testing.T) {
	dir := t.TempDir()
	// escractl certs' CA: controller.pem serves 127.0.0.1 (serverAuth),
	// a host certificate is a client certificate (clientAuth).
	if _, err := auth.Generate(dir, []string{"ctl-etcd"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	e := etcdtest.StartTLS(t, &etcdtest.TLS{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")})
	eps, err := ParseEtcdURL(e.URL())
	if err != nil {
		t.Fatal(err)
	}
	good, err := EtcdTLS(auth.CAPath(dir), auth.CertPath(dir, "ctl-etcd"), auth.KeyPath(dir, "ctl-etcd"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenEtcd(eps, DefaultEtcdPrefix, good)
	if err != nil {
		t.Fatalf("open with the CA and a client certificate: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Put(ctx, Record{Spec: adminapi.AppSpec{Name: "web", CPUCores: 1, MemoryBytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := s.Get(ctx, "web"); err != nil || !ok || r.Spec.CPUCores != 1 {
		t.Fatalf("get over TLS: %+v %v %v", r, ok, err)
	}

	noCert, err := EtcdTLS(auth.CAPath(dir), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := OpenEtcd(eps, DefaultEtcdPrefix, noCert); err == nil {
		s.Close()
		t.Fatal("etcd --client-cert-auth answered a client without a certificate")
	}
	if s, err := OpenEtcd(eps, DefaultEtcdPrefix, nil); err == nil {
		s.Close()
		t.Fatal("etcd on HTTPS answered plain HTTP")
	}
	for _, bad := range [][3]string{{"", "", ""}, {auth.CAPath(dir), auth.CertPath(dir, "ctl-etcd"), ""}, {auth.CertPath(dir, "nope"), "", ""}} {
		if _, err := EtcdTLS(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("EtcdTLS%q accepted", bad)
		}
	}
}
