package server

import (
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/store"
	"github.com/escra-dev/escra/internal/etcdtest"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// A leader that loses etcd (the etcd process stopped) gives up within its
// lease: it closes its daemon sessions and stops answering hellos; once
// etcd is back it leads again with a higher term and takes sessions.
func TestLeaderWithoutEtcdStepsDown(t *testing.T) {
	e := etcdtest.Start(t)
	t.Cleanup(func() { e.Cmd.Process.Signal(syscall.SIGCONT) }) // before the kill
	st := etcdStore(t, e)
	s := start(t, func(c *Config) { c.Store, c.Elector, c.LeaderTTL = st, st, 2*time.Second })
	waitLeading := func(want bool, within time.Duration) time.Duration {
		t.Helper()
		t0 := time.Now()
		for {
			if ok, _ := s.Leading(); ok == want {
				return time.Since(t0)
			}
			if time.Since(t0) > within {
				t.Fatalf("leading %v not reached within %v", want, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLeading(true, 10*time.Second)
	_, term1 := s.Leading()
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	d := dial(t, s, "h1", 4)
	d.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "the member", func() bool { return len(s.Snapshot().Containers) == 1 })
	eventually(t, "its limits stamped with the leader's term", func() bool { return term1 > 0 && d.LimitsTerm.Load() == term1 })

	if err := e.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	took := waitLeading(false, 10*time.Second)
	t.Logf("stepped down %v after etcd stopped (lease TTL 2 s)", took.Round(time.Millisecond))
	select {
	case <-d.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the daemon's session outlived the leadership")
	}
	if _, err := simdaemon.Dial(s.TCPAddr(), "h2", 4, 8<<30); err == nil {
		t.Fatal("a controller that does not lead gave a session")
	}

	e.Cmd.Process.Signal(syscall.SIGCONT)
	took = waitLeading(true, 20*time.Second)
	_, term2 := s.Leading()
	t.Logf("leading again %v after etcd came back; term %d → %d", took.Round(time.Millisecond), term1, term2)
	if term2 <= term1 {
		t.Fatalf("term %d after %d", term2, term1)
	}
	d2 := dial(t, s, "h1", 4)
	d2.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "the member again, in the stored app", func() bool {
		st := s.Snapshot()
		return len(st.Containers) == 1 && len(st.Apps) == 1 && st.Apps[0].CPUCores == 2 && !st.Apps[0].Auto
	})
}

// etcdStore opens the controller's store on the test etcd e, closed with
// the test.
func etcdStore(t *testing.T, e *etcdtest.Etcd) *store.Etcd {
	t.Helper()
	eps, err := store.ParseEtcdURL(e.URL())
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenEtcd(eps, store.DefaultEtcdPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
