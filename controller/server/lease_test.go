package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// adminState reads GET /v1/state and checks Σ quotas + Σ leases ≤ Ω for
// app (host-local leases: a lease counts as allocated until used or returned).
func adminState(t *testing.T, s *Server, app string) (AppState, int64) {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddr() + "/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Apps {
		if a.Name != app {
			continue
		}
		var sum int64
		for _, c := range st.Containers {
			if c.App == app {
				sum += c.CPUQuotaUs
			}
		}
		omega := int64(a.CPUCores * 100000)
		leased := int64(a.CPULeasedCores*100000 + 0.5)
		if sum+leased > omega {
			t.Fatalf("Σ quotas %d µs + Σ leases %d µs > Ω %d µs", sum, leased, omega)
		}
		return a, leased
	}
	t.Fatalf("no app %s in the admin state", app)
	return AppState{}, 0
}

// Host-local leases end to end through the real session path: a grant
// after idle periods, a use answered with the same quota (reason lease), a
// revoke on a join and its return, an over-use clamped and counted,
// strangers dropped, and the lease dropped with the session; Σ quotas + Σ
// leases ≤ Ω (from the admin API) after every step.
func TestLeaseGrantUseRevokeReturnDrop(t *testing.T) {
	s := start(t, func(c *Config) { c.Params.LeaseFraction = 0.5 })
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	d := dial(t, s, "h", 4)
	d.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "bootstrap", func() bool { c, _ := d.Container(1); return c.QuotaUs > 0 })
	adminState(t, s, "web")

	// Idle periods free the pool; the next rebalance lends half of it.
	scaleDown(t, d, 1, 60000)
	eventually(t, "a grant", func() bool { return d.Credit("web").Us > 0 })
	time.Sleep(250 * time.Millisecond) // no more telemetry: quotas and lease settle
	cr := d.Credit("web")
	if _, leased := adminState(t, s, "web"); leased != cr.Us {
		t.Fatalf("controller counts %d µs leased, the daemon holds %d", leased, cr.Us)
	}

	// A use: the daemon raised the quota itself; the controller answers
	// with the same quota under a newer generation, reason lease.
	evs, cancel := s.hub.Subscribe("web")
	defer cancel()
	before, _ := d.Container(1)
	amount := cr.Us / 2
	if err := d.UseLease("web", 1, amount); err != nil {
		t.Fatal(err)
	}
	want := before.QuotaUs + amount
	eventually(t, "the answer to the use", func() bool { c, _ := d.Container(1); return c.Gen > before.Gen })
	if c, _ := d.Container(1); c.QuotaUs != want {
		t.Fatalf("quota after the use %d µs, want %d", c.QuotaUs, want)
	}
	if cs, _ := container(s, "web", 1); cs.CPUQuotaUs != want {
		t.Fatalf("controller counts %d µs, want %d", cs.CPUQuotaUs, want)
	}
	waitEvent(t, evs, "lease", want)
	adminState(t, s, "web")

	// A join needs the pool: the lease is revoked; the return ends it.
	d.Register(2, "web", -1, 0, 10*mib)
	var rid uint64
	eventually(t, "a revoke", func() bool {
		for _, l := range d.Leases() {
			if l.Revoke {
				rid = l.LeaseId
				return true
			}
		}
		return false
	})
	adminState(t, s, "web")
	if err := d.ReturnLease("web", rid); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the newcomer at its floor", func() bool { c, _ := d.Container(2); return c.QuotaUs >= 5000 })
	adminState(t, s, "web")

	// Both idle: a new lease; a use beyond it is clamped and counted.
	for range 200 {
		if d.Credit("web").Us > 0 {
			break
		}
		d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 2000}, {Handle: 2, UsageUs: 2000}})
		time.Sleep(3 * time.Millisecond)
	}
	eventually(t, "a second grant", func() bool { return d.Credit("web").Us > 0 })
	time.Sleep(250 * time.Millisecond)
	cr2 := d.Credit("web")
	if cr2.ID == cr.ID {
		t.Fatalf("regrant reused lease id %d", cr.ID)
	}
	_, leased := adminState(t, s, "web")
	before, _ = d.Container(1)
	if err := d.UseLease("web", 1, leased+50000); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the clamped answer", func() bool { c, _ := d.Container(1); return c.Gen > before.Gen })
	if c, _ := d.Container(1); c.QuotaUs != before.QuotaUs+leased {
		t.Fatalf("over-use: quota %d µs, want %d + %d (the lease)", c.QuotaUs, before.QuotaUs, leased)
	}
	adminState(t, s, "web")

	// Strangers: an unknown handle, app and lease id are dropped.
	d.UseLease("web", 99, 1000)
	d.UseLease("nope", 1, 1000)
	d.ReturnLease("nope", 1)
	d.ReturnLease("web", 12345)
	eventually(t, "counters", func() bool {
		m := scrape(t, s)
		return strings.Contains(m, `escra_bad_input_total{reason="lease_over"} 1`) &&
			strings.Contains(m, `escra_bad_input_total{reason="lease_unknown"} 4`) &&
			strings.Contains(m, `escra_decisions_total{reason="lease"} 2`) &&
			strings.Contains(m, `escra_lease_events_total{event="use"} 1`) &&
			strings.Contains(m, `escra_lease_events_total{event="return"} 1`) &&
			strings.Contains(m, `escra_app_cpu_leased_cores{app="web"}`)
	})
	adminState(t, s, "web")

	// The session ends: the controller drops the lease.
	eventually(t, "a lease outstanding", func() bool { _, l := adminState(t, s, "web"); return l > 0 })
	d.Close()
	eventually(t, "the lease dropped with the session", func() bool {
		a, l := adminState(t, s, "web")
		return l == 0 && a.Members == 0
	})
}

func waitEvent(t *testing.T, evs <-chan events.Event, reason string, quota int64) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for {
		select {
		case ev := <-evs:
			if ev.Kind == "limits" && ev.Reason == reason && ev.CPUQuotaUs == quota {
				return
			}
		case <-deadline:
			t.Fatalf("no limits event %s / %d µs", reason, quota)
		}
	}
}
