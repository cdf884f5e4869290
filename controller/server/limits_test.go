package server

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// Past MaxSessions a connection is closed at once and counted; a slot
// freed by a session that ended is usable again.
func TestMaxSessions(t *testing.T) {
	s := start(t, func(c *Config) { c.MaxSessions = 2 })
	dial(t, s, "h1", 4)
	h2 := dial(t, s, "h2", 4)
	if d, err := simdaemon.Dial(s.TCPAddr(), "h3", 4, 8<<30); err == nil {
		d.Close()
		t.Fatal("a third session opened past MaxSessions 2")
	}
	if n := s.Stats().Dropped["connection_cap"]; n != 1 {
		t.Fatalf("connection_cap counted %d times; want 1", n)
	}
	h2.Close()
	eventually(t, "h3 admitted once h2 is gone", func() bool {
		d, err := simdaemon.Dial(s.TCPAddr(), "h3", 4, 8<<30)
		if err != nil {
			return false
		}
		d.Close()
		return true
	})
}

// A daemon sending faster than SessionMsgRate past its burst is read no
// faster: its 60 registrations take over half a second at 100 a second
// with a burst of 10, none is lost, and the pacing is counted.
func TestSessionMessageRate(t *testing.T) {
	s := start(t, func(c *Config) { c.SessionMsgRate, c.SessionMsgBurst = 100, 10 })
	d := dial(t, s, "h1", 4)
	t0 := time.Now()
	for h := uint32(1); h <= 60; h++ {
		d.Register(h, "web", -1, 0, mib)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(s.Snapshot().Containers); n >= 60 {
		t.Fatalf("all %d registrations read within 200 ms at 100 a second", n)
	}
	eventually(t, "all 60 registered", func() bool { return len(s.Snapshot().Containers) == 60 })
	took := time.Since(t0)
	if took < 450*time.Millisecond || s.Stats().Dropped["session_rate"] == 0 {
		t.Fatalf("60 registrations in %v (want >= 0.5 s at 100/s past a burst of 10), session_rate %d",
			took, s.Stats().Dropped["session_rate"])
	}
}

// A session's own tagged datagram sent again from another address (a
// spoofed or relayed copy) is dropped as wrong_source before its tag is
// checked; the daemon's own datagrams from its peer address go through.
func TestTelemetryFromAnotherAddressDropped(t *testing.T) {
	dir := pki(t, "h1")
	s := startTLS(t, dir)
	d, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	var mu sync.Mutex
	var sent [][]byte
	d.Tap = func(b []byte) { mu.Lock(); sent = append(sent, b); mu.Unlock() }
	d.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "bootstrap", func() bool { c, ok := d.Container(1); return ok && c.QuotaUs > 0 })
	d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 1000}})
	eventually(t, "the daemon's own datagram taken", func() bool { return s.Stats().TelemetryStats > 0 })
	other, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s.UDPAddr())))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	mu.Lock()
	copies := append([][]byte(nil), sent...)
	mu.Unlock()
	for _, b := range copies {
		other.Write(b)
	}
	eventually(t, "copies from 127.0.0.2 dropped as wrong_source", func() bool {
		return s.Stats().Dropped[ingest.DropWrongSource] == uint64(len(copies))
	})
	if n := s.Stats().Dropped[ingest.DropForged] + s.Stats().Dropped[ingest.DropReplayed]; n != 0 {
		t.Fatalf("%d copies reached the tag or replay check", n)
	}
	// The host's count is its own datagrams only, not the copies.
	if hs := s.Snapshot().Hosts; len(hs) != 1 || hs[0].TelemetryDatagrams != uint64(len(copies)) {
		t.Fatalf("hosts %+v: want telemetry_datagrams %d", hs, len(copies))
	}
}
