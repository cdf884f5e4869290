package ingest

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// counting collects what reached the sink per session and the drops.
type counting struct {
	mu    sync.Mutex
	got   map[uint32]int
	drops map[string]int
}

func listen(t *testing.T, c *counting) *Listener {
	t.Helper()
	c.got, c.drops = map[uint32]int{}, map[string]int{}
	l, err := Listen("127.0.0.1:0", func(sess uint32, stats []Stat, _ int64) {
		c.mu.Lock()
		c.got[sess]++
		c.mu.Unlock()
	}, func(reason string, n int) {
		c.mu.Lock()
		c.drops[reason] += n
		c.mu.Unlock()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// sender is a UDP socket on a loopback address of its own (127.0.0.0/8
// is all loopback), so each is its own source.
func sender(t *testing.T, from, to string) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(from+":0")), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(to)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func datagram(sess uint32, seq uint64, tag bool) []byte {
	b, _ := proto.Marshal(&pb.TelemetryBatch{SessionId: sess, BatchSeq: seq, PeriodUs: 100000,
		Stats: []*pb.CpuStat{{Handle: 1, PeriodSeq: seq, QuotaUs: 10000}}})
	if tag {
		b = append(b, make([]byte, wire.TagBytes)...)
	}
	return b
}

// One source flooding the port is cut to its bucket; another source's
// datagrams all get through.
func TestPerSourceBucketsKeepOthersFlowing(t *testing.T) {
	var c counting
	l := listen(t, &c)
	l.LimitPerSource(50, 50)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Serve(ctx)
	flood, legit := sender(t, "127.0.0.2", l.Addr()), sender(t, "127.0.0.3", l.Addr())
	t0 := time.Now()
	for i := range 20 {
		for j := range 100 {
			flood.Write(datagram(2, uint64(i*100+j+1), false))
		}
		legit.Write(datagram(3, uint64(i+1), false))
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	time.Sleep(100 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got[3] != 20 {
		t.Fatalf("the legitimate source got %d of 20 datagrams through beside a flood", c.got[3])
	}
	if most := 50 + int(50*elapsed.Seconds()) + 1; c.got[2] > most || c.drops[DropRateLimited] == 0 {
		t.Fatalf("the flooding source got %d of 2000 through in %v (bucket: at most %d), %d rate-limited", c.got[2], elapsed, most, c.drops[DropRateLimited])
	}
	t.Logf("flood: %d of 2000 through, %d dropped; legitimate: 20 of 20", c.got[2], c.drops[DropRateLimited])
}

type peerAuth struct {
	peer     netip.Addr
	verifies atomic.Int32
}

func (a *peerAuth) Verify(uint32, []byte) bool { a.verifies.Add(1); return true }
func (a *peerAuth) Accept(uint32, uint64) bool { return true }
func (a *peerAuth) FromPeer(_ uint32, addr netip.Addr) bool {
	return addr == a.peer
}

// In authenticated mode a datagram naming a session but sent from
// another address than the session's peer is dropped before its tag is
// computed; the peer's own datagrams go on to the HMAC.
func TestSourceCheckedBeforeHMAC(t *testing.T) {
	var c counting
	l := listen(t, &c)
	auth := &peerAuth{peer: netip.MustParseAddr("127.0.0.3")}
	l.Auth = auth
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Serve(ctx)
	spoof, peer := sender(t, "127.0.0.2", l.Addr()), sender(t, "127.0.0.3", l.Addr())
	for i := range 10 {
		spoof.Write(datagram(3, uint64(100+i), true))
	}
	peer.Write(datagram(3, 1, true))
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		n := c.got[3] + c.drops[DropWrongSource]
		c.mu.Unlock()
		if n == 11 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drops[DropWrongSource] != 10 || c.got[3] != 1 || auth.verifies.Load() != 1 {
		t.Fatalf("wrong source dropped %d of 10, the peer's %d of 1 through, %d tags computed (want 1)",
			c.drops[DropWrongSource], c.got[3], auth.verifies.Load())
	}
}
