package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/internal/simdaemon"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// scaleDown sends idle periods until the member's quota is below maxUs, so
// the app has an unallocated pool a throttle event can draw from.
func scaleDown(t *testing.T, d *simdaemon.Daemon, h uint32, maxUs int64) {
	t.Helper()
	for range 300 {
		c, _ := d.Container(h)
		if c.QuotaUs > 0 && c.QuotaUs < maxUs {
			return
		}
		d.SendPeriod([]simdaemon.Stat{{Handle: h, UsageUs: 5000}})
		time.Sleep(3 * time.Millisecond)
	}
	c, _ := d.Container(h)
	t.Fatalf("quota still %d µs after 300 idle periods", c.QuotaUs)
}

func scrape(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// midPeriod sends one raw throttle-event datagram (any period_seq).
func midPeriod(t *testing.T, d *simdaemon.Daemon, st *pb.CpuStat) {
	t.Helper()
	st.MidPeriod = true
	b := wire.Batcher{SessionID: d.SessionID, PeriodUs: 100000}
	if err := b.Add(st, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(d.SendDatagram); err != nil {
		t.Fatal(err)
	}
}

// A throttle event raises the quota at once through the same path as a
// period decision (SetLimits to the daemon, a new generation, an event
// with reason throttle-event); escra-paper ignores it; an event for a
// period already reported is stale and one with absurd fields is dropped.
func TestThrottleEventRaisesQuotaMidPeriod(t *testing.T) {
	s := start(t, nil)
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := s.DefineApp(AppSpec{Name: "paper", Policy: "escra-paper", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	d := dial(t, s, "h", 4)
	d.Register(1, "web", -1, 0, 10*mib)
	d.Register(2, "paper", -1, 0, 10*mib)
	eventually(t, "bootstrap", func() bool {
		a, _ := d.Container(1)
		b, _ := d.Container(2)
		return a.QuotaUs > 0 && b.QuotaUs > 0
	})
	scaleDown(t, d, 1, 100000)
	scaleDown(t, d, 2, 100000)
	time.Sleep(20 * time.Millisecond) // let the last period decisions land
	web, _ := d.Container(1)
	paper, _ := d.Container(2)
	q, qp := web.QuotaUs, paper.QuotaUs

	evs, cancel := s.hub.Subscribe("web")
	defer cancel()
	gen0 := func() uint64 { c, _ := container(s, "web", 1); return c.Generation }()
	if err := d.SendThrottleEvent(1, 42); err != nil {
		t.Fatal(err)
	}
	eventually(t, "quota raised by the throttle event", func() bool {
		c, _ := d.Container(1)
		return c.QuotaUs > q
	})
	c, _ := d.Container(1)
	// escra: q + max(q, Υ·U/λ), from the pool.
	if c.QuotaUs < 2*q {
		t.Errorf("quota %d µs after a throttle event at %d µs; want at least doubled", c.QuotaUs, q)
	}
	cs, _ := container(s, "web", 1)
	if cs.Generation <= gen0 || cs.CPUQuotaUs != c.QuotaUs || cs.ThrottleEvents != 1 {
		t.Errorf("controller state after the event: %+v (generation before %d)", cs, gen0)
	}
	var ev events.Event
	select {
	case ev = <-evs:
	case <-time.After(2 * time.Second):
		t.Fatal("no limits event for the raise")
	}
	if ev.Kind != "limits" || ev.Reason != "throttle-event" || ev.CPUQuotaUs != c.QuotaUs {
		t.Errorf("event %+v, want limits / throttle-event / %d", ev, c.QuotaUs)
	}

	// The negative control: escra-paper decides once per period.
	d.SendThrottleEvent(2, 7)
	// Stale: period 0 was reported long ago.
	midPeriod(t, d, &pb.CpuStat{Handle: 1, PeriodSeq: 0, QuotaUs: c.QuotaUs, NrThrottled: 43})
	// Absurd: dropped at decode like any stat.
	midPeriod(t, d, &pb.CpuStat{Handle: 1, PeriodSeq: 1 << 40, QuotaUs: -7})
	eventually(t, "nochange, stale and absurd counted", func() bool {
		m := scrape(t, s)
		return strings.Contains(m, `escra_throttle_events_total{result="raised"} 1`) &&
			strings.Contains(m, `escra_throttle_events_total{result="nochange"} 1`) &&
			strings.Contains(m, `escra_throttle_events_total{result="stale"} 1`) &&
			strings.Contains(m, `escra_bad_input_total{reason="absurd"} 1`) &&
			strings.Contains(m, `escra_container_throttle_events_total{app="paper",container="h-c2",host="h"} 1`)
	})
	if c, _ := d.Container(2); c.QuotaUs != qp {
		t.Errorf("escra-paper quota moved mid-period: %d -> %d µs", qp, c.QuotaUs)
	}
	if c2, _ := d.Container(1); c2.QuotaUs != c.QuotaUs {
		t.Errorf("a stale or absurd event moved the quota: %d -> %d µs", c.QuotaUs, c2.QuotaUs)
	}
}
