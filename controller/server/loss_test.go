package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// lossyRelay forwards datagrams to dst, dropping a share (per mille).
type lossyRelay struct {
	conn      *net.UDPConn
	loss      atomic.Uint64
	fwd, drop atomic.Uint64
}

func newLossyRelay(t *testing.T, dst string) *lossyRelay {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ua, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		t.Fatal(err)
	}
	out, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		t.Fatal(err)
	}
	r := &lossyRelay{conn: c}
	t.Cleanup(func() { c.Close(); out.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if rand.N(uint64(1000)) < r.loss.Load() {
				r.drop.Add(1)
				continue
			}
			r.fwd.Add(1)
			out.Write(buf[:n])
		}
	}()
	return r
}

func (r *lossyRelay) Addr() string { return r.conn.LocalAddr().String() }

func freeUDP(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// 20 % of telemetry datagrams lost on the way (a lossy loopback relay the
// controller advertises, over mutual TLS with tagged datagrams): the
// allocator still follows demand. One member needs 1.2 cores and is
// throttled, the other idles; the number of periods until the busy one's
// quota reaches 95 % of its demand is measured without and with loss. The
// daemon side is the scripted simdaemon so the demand is exact (this
// machine is shared: a real spin gets whatever CPU is left).
func TestTelemetryLoss20Percent(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.GenerateBound(dir, []string{"sim1"}, []string{auth.AnyApp}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	sc, err := auth.ServerConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := auth.ClientConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "sim1"), Key: auth.KeyPath(dir, "sim1")}, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	udp := freeUDP(t)
	relay := newLossyRelay(t, udp)
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr, cfg.TelemetryAdvertise = "127.0.0.1:0", udp, "", relay.Addr()
	cfg.ReclaimEvery, cfg.TLS = 0, sc
	// The simulated daemon does not spend host-local leases (escrad raises
	// its throttled containers from them): a lease would hold the pool the
	// controller's own raises, which this test measures, need.
	cfg.Params.LeaseFraction = 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const demand = 120000
	result := map[int][2]int{} // loss ‰ -> periods to reach demand, mean |quota-demand| after
	for round, loss := range []int{0, 200} {
		relay.loss.Store(uint64(loss))
		app := fmt.Sprintf("loss%d", loss)
		if err := s.DefineApp(AppSpec{Name: app, CPUCores: 1.5, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
			t.Fatal(err)
		}
		d, err := simdaemon.DialTLS(s.TCPAddr(), "sim1", 4, 8<<30, cc)
		if err != nil {
			t.Fatal(err)
		}
		busy, idle := uint32(2*round+1), uint32(2*round+2)
		d.Register(busy, app, 20000, 0, 1<<20)
		d.Register(idle, app, 20000, 0, 1<<20)
		eventually(t, "bootstrap", func() bool {
			a, ok1 := d.Container(busy)
			b, ok2 := d.Container(idle)
			return ok1 && ok2 && a.Gen > 0 && b.Gen > 0
		})
		reached, dev, n := 0, int64(0), 0
		for p := 1; p <= 1500 && n < 200; p++ {
			a, _ := d.Container(busy)
			d.SendPeriod([]simdaemon.Stat{{Handle: busy, UsageUs: demand, Throttled: a.QuotaUs < demand}, {Handle: idle, UsageUs: 2000}})
			time.Sleep(3 * time.Millisecond)
			a, _ = d.Container(busy)
			if reached == 0 && a.QuotaUs >= demand*95/100 {
				reached = p
			}
			if reached != 0 && p > reached {
				dev += max(a.QuotaUs-demand, demand-a.QuotaUs)
				n++
			}
		}
		d.Close()
		if reached == 0 {
			t.Fatalf("loss %d‰: the busy member's quota never reached 95%% of its demand in 1500 periods", loss)
		}
		result[loss] = [2]int{reached, int(dev / int64(max(n, 1)))}
	}
	t.Logf("periods until quota ≥ 95%% of demand: %d without loss, %d with 20%% loss (%.2fx); mean |quota-demand| afterwards: %d µs vs %d µs; relay forwarded %d, dropped %d",
		result[0][0], result[200][0], float64(result[200][0])/float64(result[0][0]), result[0][1], result[200][1],
		relay.fwd.Load(), relay.drop.Load())
	if relay.drop.Load() == 0 {
		t.Fatal("the relay dropped nothing")
	}
}
