package rescue

import (
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// The user's own limit: four times Escra's reduced one.
const ceiling = 4 * limit0

// With no controller to ask, an OOM below the user's ceiling is answered
// on the host: the limit goes up to the ceiling and the event resolves
// as granted there, never a kill at Escra's reduced limit. Each way the
// controller can be missing: no session at all, the session dropping
// with the request out, the deadline passing with the link down.
func TestOutageRaisesToCeiling(t *testing.T) {
	for _, tc := range []string{"unreachable", "lost", "deadline_link_down"} {
		t.Run(tc, func(t *testing.T) {
			g := newRig(t, 30*time.Millisecond)
			g.c.Ceiling = ceiling
			switch tc {
			case "unreachable":
				g.link.setDown(true)
				g.r.OOM(g.event(4))
			case "lost":
				g.r.OOM(g.event(4))
				g.link.setDown(true)
				g.link.answer(0, nil)
			case "deadline_link_down":
				g.r.OOM(g.event(4))
				g.link.setDown(true) // the link fails; no verdict comes
			}
			res := g.resolved(t)
			if !res.granted || res.limit != ceiling {
				t.Fatalf("resolved %+v, want granted at the ceiling %d", res, ceiling)
			}
			if len(g.mem.raises) != 1 || g.mem.raises[0] != ceiling {
				t.Fatalf("raises %v, want one to the ceiling", g.mem.raises)
			}
			// The raise is the limit in place: what the next session's
			// registration reports to the controller.
			if cur, _ := g.mem.Current(); cur.MemoryBytes != ceiling {
				t.Fatalf("limit in place %d, want %d", cur.MemoryBytes, ceiling)
			}
			if o, rescues := g.outcomes(t); o["outage_raised"] != 1 || len(o) != 1 || rescues != 1 {
				t.Fatalf("outcomes %v, %d rescues; want one outage_raised rescue", o, rescues)
			}
		})
	}
}

// No ceiling (Docker's unlimited): raised to unlimited.
func TestOutageUnlimitedCeiling(t *testing.T) {
	g := newRig(t, time.Minute)
	g.c.Ceiling = cgroups.Max
	g.link.setDown(true)
	g.r.OOM(g.event(4))
	if res := g.resolved(t); !res.granted || res.limit != cgroups.Max {
		t.Fatalf("resolved %+v, want granted unlimited", res)
	}
}

// A controller that is up decides: its denial and its silence past the
// deadline are not overridden, and an OOM already at the user's ceiling
// is what Docker would do too (the kernel acts).
func TestOutageOnlyWithoutController(t *testing.T) {
	g := newRig(t, time.Minute)
	g.c.Ceiling = ceiling
	g.r.OOM(g.event(4))
	g.link.answer(0, &pb.OomVerdict{Granted: false})
	if res := g.resolved(t); res.granted {
		t.Fatalf("resolved %+v after a denial, want not granted", res)
	}

	g = newRig(t, 20*time.Millisecond)
	g.c.Ceiling = ceiling
	g.r.OOM(g.event(4))
	if res := g.resolved(t); res.granted {
		t.Fatalf("resolved %+v at the deadline with the link up, want not granted", res)
	}

	g = newRig(t, time.Minute)
	g.c.Ceiling = limit0
	g.link.setDown(true)
	g.r.OOM(g.event(4))
	if res := g.resolved(t); res.granted {
		t.Fatalf("resolved %+v at the ceiling, want not granted", res)
	}
	if len(g.mem.raises) != 0 {
		t.Fatalf("raises %v at the ceiling, want none", g.mem.raises)
	}
	if o, _ := g.outcomes(t); o["controller_unreachable"] != 1 {
		t.Fatalf("outcomes %v, want controller_unreachable", o)
	}
}
