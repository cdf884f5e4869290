package ingest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// drain counts what conn holds now, and how many came from bad.
func drain(conn *net.UDPConn, bad netip.Addr) (n, fromBad int) {
	buf := make([]byte, 2048)
	for {
		conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return n, fromBad
		}
		n++
		if from.Addr().Unmap() == bad {
			fromBad++
		}
	}
}

// The kernel property the per-session sockets rest on: with the shared
// socket's buffer overflowing under a flood from 127.0.0.2 (nobody reads
// it), every datagram from 127.0.0.3 lands on the socket connected to it
// and none of the flood does, while a source with no socket of its own
// (127.0.0.4) loses all of its datagrams. The port stays exclusive to the
// listener.
func TestConnectedSocketTakesItsSourceBesideAFlood(t *testing.T) {
	var c counting
	l := listen(t, &c)
	l.conn.SetReadBuffer(64 << 10)
	host, other := sender(t, "127.0.0.3", l.Addr()), sender(t, "127.0.0.4", l.Addr())
	own, err := l.dialPinned(host.LocalAddr().(*net.UDPAddr).AddrPort())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(l.local)); !errors.Is(err, syscall.EADDRINUSE) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("another socket bound the telemetry port beside the listener: %v", err)
	}
	flood := sender(t, "127.0.0.2", l.Addr())
	junk := make([]byte, len(datagram(4, 1, true))) // as large: no room left for one
	for range 20000 {
		flood.Write(junk)
	}
	for range 100 { // the flood goes on: the shared buffer stays full
		host.Write(datagram(3, 1, true))
		other.Write(datagram(4, 1, true))
		for range 20 {
			flood.Write(junk)
		}
	}
	got, flooded := drain(own, netip.MustParseAddr("127.0.0.2"))
	shared, fromOther := drain(l.conn, netip.MustParseAddr("127.0.0.4"))
	t.Logf("own socket: %d of 100, %d of the flood; shared: %d held, %d of 100 from the source without a socket", got, flooded, shared, fromOther)
	if got != 100 || flooded != 0 {
		t.Fatalf("the connected socket got %d of its source's 100 datagrams and %d of the flood", got, flooded)
	}
	if fromOther != 0 {
		t.Fatalf("the shared socket did not overflow (%d of 100 through): the test shows nothing", fromOther)
	}
}

// knownAuth knows a set of sessions; their datagrams verify.
type knownAuth struct {
	mu    sync.Mutex
	known map[uint32]bool
}

func (a *knownAuth) Verify(s uint32, _ []byte) bool { return a.Known(s) }
func (a *knownAuth) Accept(uint32, uint64) bool     { return true }
func (a *knownAuth) Known(s uint32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.known[s]
}
func (a *knownAuth) forget(s uint32) { a.mu.Lock(); delete(a.known, s); a.mu.Unlock() }

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); !f(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (c *counting) of(sess uint32) int { c.mu.Lock(); defer c.mu.Unlock(); return c.got[sess] }

// A session's first authenticated datagram gives it a socket of its own
// (at most the cap of them); its next datagrams arrive there, two such
// sockets on one port each get their own source's, and nothing is lost
// beside a flood of the shared socket. EndSession closes it.
func TestSessionGetsItsOwnSocket(t *testing.T) {
	var c counting
	l := listen(t, &c)
	l.conn.SetReadBuffer(64 << 10)
	auth := &knownAuth{known: map[uint32]bool{3: true, 4: true, 5: true}}
	l.Auth = auth
	l.PinSessions(2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	hosts := []*net.UDPConn{sender(t, "127.0.0.3", l.Addr()), sender(t, "127.0.0.4", l.Addr()), sender(t, "127.0.0.5", l.Addr())}
	for i, h := range hosts {
		h.Write(datagram(uint32(3+i), 1, true))
		waitFor(t, "a first datagram", func() bool { return c.of(uint32(3+i)) == 1 })
	}
	if l.Pins() != 2 {
		t.Fatalf("%d sockets open for 3 sessions, cap 2", l.Pins())
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		flood := sender(t, "127.0.0.2", l.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			junk := make([]byte, 1200)
			for !stop.Load() {
				flood.Write(junk)
			}
		}()
	}
	const n = 200
	for i := range n {
		hosts[0].Write(datagram(3, uint64(i+2), true))
		hosts[1].Write(datagram(4, uint64(i+2), true))
		time.Sleep(2 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	waitFor(t, "the sessions' datagrams", func() bool { return c.of(3) == n+1 && c.of(4) == n+1 })
	if p := l.C.Pinned.Load(); p < 2*n {
		t.Fatalf("%d of %d datagrams came in on the sessions' own sockets", p, 2*n)
	}
	t.Logf("%d datagrams in all, %d on the sessions' own sockets; sessions 3 and 4: %d and %d of %d", l.C.Datagrams.Load(), l.C.Pinned.Load(), c.of(3), c.of(4), n+1)

	auth.forget(3)
	l.EndSession(3)
	if l.Pins() != 1 {
		t.Fatalf("%d sockets open after one of two sessions ended", l.Pins())
	}
	before := l.C.Pinned.Load()
	hosts[0].Write(datagram(3, 500, true))
	waitFor(t, "the ended session's datagram dropped", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.drops[DropUnknownSession] == 1
	})
	if l.C.Pinned.Load() != before || l.Pins() != 1 {
		t.Fatalf("an ended session's datagram came in on a socket of its own")
	}
}

// Plain mode has no authenticated session to give a socket.
func TestNoOwnSocketUnauthenticated(t *testing.T) {
	var c counting
	l := listen(t, &c)
	l.PinSessions(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Serve(ctx)
	sender(t, "127.0.0.3", l.Addr()).Write(datagram(3, 1, false))
	waitFor(t, "the datagram", func() bool { return c.of(3) == 1 })
	if l.Pins() != 0 {
		t.Fatalf("an unauthenticated session got a socket")
	}
}
