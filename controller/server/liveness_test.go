package server

import (
	"testing"
	"time"
)

// A daemon that stops sending (socket open, nothing on it) is declared
// dead within 3 s and its members stop holding budget; its live sibling
// keeps its session, and the dead one's share is back in the pool. A host that reconnects
// replaces its old session at once: one session per host id.
func TestSilentDaemonDeadAndReconnectReplaces(t *testing.T) {
	s := start(t, nil)
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	quiet := dial(t, s, "h1", 4)
	live := dial(t, s, "h2", 4)
	quiet.Register(1, "web", -1, 0, 10*mib)
	live.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "two members", func() bool { return s.Snapshot().Apps[0].Members == 2 })
	quiet.Mute.Store(true)
	t0 := time.Now()
	select {
	case <-quiet.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the silent daemon's session was never ended")
	}
	d := time.Since(t0)
	t.Logf("silent session ended %v after its daemon was muted (heartbeats every 1 s)", d.Round(time.Millisecond))
	if d > 4500*time.Millisecond {
		t.Fatalf("silent session ended after %v; want within 3 s of the last heartbeat (≤ 4 s since muting)", d)
	}
	st := s.Snapshot()
	if len(st.Hosts) != 1 || st.Hosts[0].HostID != "h2" || st.Apps[0].Members != 1 {
		t.Fatalf("after the silent host died: hosts %+v, members %d", st.Hosts, st.Apps[0].Members)
	}
	// The dead member's share is back in the pool: allocated = the live one's.
	eventually(t, "the dead member's share released", func() bool {
		a, c := s.Snapshot().Apps[0], s.Snapshot().Containers
		return len(c) == 1 && a.CPUAllocatedCores == float64(c[0].CPUQuotaUs)/100000 && a.CPUUnallocatedCores >= 1-1e-9
	})
	if live.HeartbeatsIn.Load() == 0 {
		t.Error("the controller echoes no heartbeats (daemons could not tell it is silent)")
	}

	// h2 reconnects (its old session still open): the new one replaces it.
	again := dial(t, s, "h2", 4)
	select {
	case <-live.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the old session of a reconnected host stays open")
	}
	again.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "one session and one member for h2", func() bool {
		st := s.Snapshot()
		return len(st.Hosts) == 1 && st.Hosts[0].SessionID == again.SessionID && st.Apps[0].Members == 1
	})
}
