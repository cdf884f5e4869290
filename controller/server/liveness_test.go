package server

import (
	"testing"
	"time"
)

// A daemon that stops sending (socket open, nothing on it) is declared
// dead within 3 s and its members leave; its live sibling keeps its
// session. The dead one's share is held out of the pool (its escrad may
// still apply it) until its container rejoins. A host that reconnects
// replaces its old session at once: one session per host id.
func TestSilentDaemonDeadAndReconnectReplaces(t *testing.T) {
	s := start(t, func(c *Config) { c.DeadHold = time.Hour })
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
	// The dead member's share is held: allocated = the live one's, and the
	// pool lacks what the dead one had.
	eventually(t, "the dead member's share held", func() bool {
		a, c := s.Snapshot().Apps[0], s.Snapshot().Containers
		return len(c) == 1 && a.CPUAllocatedCores == float64(c[0].CPUQuotaUs)/100000 && a.CPUHeldCores > 0 &&
			a.MemoryHeldBytes > 0 && a.CPUUnallocatedCores < 2-a.CPUAllocatedCores-a.CPUHeldCores+1e-9
	})
	// Its container rejoins from a new session: the held share comes back.
	back := dial(t, s, "h1", 4)
	back.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "the held share released by the rejoin", func() bool {
		a := s.Snapshot().Apps[0]
		return a.Members == 2 && a.CPUHeldCores == 0 && a.MemoryHeldBytes == 0
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
		return len(st.Hosts) == 2 && st.Apps[0].Members == 2 && st.Apps[0].CPUHeldCores == 0
	})
	for _, h := range s.Snapshot().Hosts {
		if h.HostID == "h2" && h.SessionID != again.SessionID {
			t.Fatalf("h2's session is %d, want the new one %d", h.SessionID, again.SessionID)
		}
	}
}

// A dead host's held share goes back to the pool once the hold ends (the
// time its escrad keeps the limits before putting Docker's back).
func TestDeadHostShareReleasedAfterHold(t *testing.T) {
	s := start(t, func(c *Config) { c.DeadHold = 10 * time.Millisecond })
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	gone := dial(t, s, "h1", 4)
	live := dial(t, s, "h2", 4)
	gone.Register(1, "web", -1, 0, 10*mib)
	live.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "two members", func() bool { return s.Snapshot().Apps[0].Members == 2 })
	gone.Close()
	eventually(t, "the dead member's share back in the pool", func() bool {
		a, c := s.Snapshot().Apps[0], s.Snapshot().Containers
		return len(c) == 1 && a.CPUHeldCores == 0 && a.MemoryHeldBytes == 0 &&
			a.CPUUnallocatedCores >= 2-float64(c[0].CPUQuotaUs)/100000-1e-9
	})
}

// A host back with a session that does not register a held container (it
// was removed while the host was silent) ends that hold once it had the
// grace to: escrad registers everything it manages on connect.
func TestHostBackWithoutContainerEndsItsHold(t *testing.T) {
	s := start(t, func(c *Config) { c.DeadHold = time.Hour; c.RejoinGrace = 200 * time.Millisecond })
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	gone := dial(t, s, "h1", 4)
	live := dial(t, s, "h2", 4)
	gone.Register(1, "web", -1, 0, 10*mib)
	live.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "two members", func() bool { return s.Snapshot().Apps[0].Members == 2 })
	gone.Close()
	eventually(t, "the silent member held", func() bool { return s.Snapshot().Apps[0].CPUHeldCores > 0 })
	time.Sleep(400 * time.Millisecond)
	if a := s.Snapshot().Apps[0]; a.CPUHeldCores == 0 {
		t.Fatal("hold ended with the host still silent")
	}
	dial(t, s, "h1", 4) // registers nothing
	eventually(t, "the hold of the container h1 no longer has ended", func() bool {
		a := s.Snapshot().Apps[0]
		return a.CPUHeldCores == 0 && a.MemoryHeldBytes == 0
	})
}
