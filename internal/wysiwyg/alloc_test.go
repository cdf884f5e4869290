package wysiwyg

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"
)

func TestCPUSetFormat(t *testing.T) {
	for _, in := range []string{"", "0", "0-3", "0,2-4,7", "1,3"} {
		s, err := ParseCPUSet(in)
		if err != nil {
			t.Fatal(err)
		}
		if s.String() != in {
			t.Errorf("%q round-trips to %q", in, s.String())
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "0-99999999"} {
		if _, err := ParseCPUSet(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The example of §IV-B: 350% on an empty 6-core host is 3 P1 cores and
// half of a P2 core, 4 cores seen; a C2 sees the other 3.
func TestAlgorithm1Example(t *testing.T) {
	h := NewHost(6, Hard)
	if _, err := h.Add("web", C2, 500); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Add("spark", C1, 3500); err != nil {
		t.Fatal(err)
	}
	a, _ := h.Get("spark")
	if len(a.P1) != 3 || len(a.P2) != 1 || len(a.CPUs()) != 4 {
		t.Fatalf("spark got P1 %v P2 %v", a.P1, a.P2)
	}
	if got := h.CPUs("web"); len(got) != 3 || got.Has(a.P1[0]) {
		t.Fatalf("C2 cpuset %v with spark's P1 %v", got, a.P1)
	}
	// A second fraction goes to the emptiest P2 core: the same one (the
	// only P2 core, with 500m free) rather than a new P3 core.
	if _, err := h.Add("b", C1, 400); err != nil {
		t.Fatal(err)
	}
	b, _ := h.Get("b")
	for c := range b.P2 {
		if _, shared := a.P2[c]; !shared {
			t.Fatalf("b's fraction on core %d, spark's on %v: not first-fit on P2", c, a.P2)
		}
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	// Missing whole cores with frac = 0: abort (line 14), nothing booked.
	g := NewHost(4, Hard)
	for _, id := range []string{"a", "b", "c"} {
		mustAdd(t, g, id, C1, 600) // three P2 cores, 1200m free on them
	}
	if _, err := g.Add("big", C1, 2000); !errors.Is(err, ErrNotWYSIWYG) {
		t.Fatalf("2 whole cores on 1 P3 core: %v", err)
	}
	if g.Booked() != 1800 || len(g.P1()) != 0 {
		t.Fatal("an aborted allocation left cores booked")
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
}

// 150% on a 2-core host with one core's worth taken as fractions: line 15
// ("can still ensure WYSIWYG") spreads the rest over ⌈rem⌉ P2 cores.
func TestMissingWholeCoresOnP2(t *testing.T) {
	h := NewHost(2, Hard)
	mustAdd(t, h, "a", C1, 300) // P2 core 0
	mustAdd(t, h, "b", C1, 200) // emptiest P2 core: core 0 again
	mustAdd(t, h, "c", C1, 1400)
	c, _ := h.Get("c")
	if len(c.CPUs()) != 2 || len(c.P1) != 1 {
		t.Fatalf("c: %+v", c)
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	// Best-effort lifts the limit n: 3 fractions of 300 on 3 cores.
	be := NewHost(3, BestEffort)
	for i, r := range []int64{700, 700, 700} {
		mustAdd(t, be, fmt.Sprint(i), C1, r)
	}
	if _, err := be.Add("x", C1, 800); err != nil {
		t.Fatal(err)
	}
	x, _ := be.Get("x")
	if len(x.CPUs()) < 2 {
		t.Fatalf("best-effort x: %+v", x)
	}
	hard := NewHost(3, Hard)
	for i, r := range []int64{700, 700, 700} {
		mustAdd(t, hard, fmt.Sprint(i), C1, r)
	}
	if _, err := hard.Add("x", C1, 800); !errors.Is(err, ErrNotWYSIWYG) {
		t.Fatalf("principle-hard x: %v", err)
	}
}

func mustAdd(t *testing.T, h *Host, id string, c Class, r int64) {
	t.Helper()
	if _, err := h.Add(id, c, r); err != nil {
		t.Fatalf("add %s %dm: %v", id, r, err)
	}
}

// TestPlansKeepInvariants is the property test: random sequences of
// add/resize/remove of C1 and C2 containers on random hosts, both modes,
// with and without C2 capacity; every step of every plan is applied to a
// model of the cgroup files and checked (View.Check with the P1 cores of
// the states before and after), and after each operation the files equal
// the allocation and the bookkeeping validates.
func TestPlansKeepInvariants(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	for seed := 0; seed < seeds; seed++ {
		rng := rand.New(rand.NewSource(int64(seed)))
		h := NewHost(1+rng.Intn(8), Mode(rng.Intn(2)))
		h.CountShared = rng.Intn(2) == 0
		v := NewView()
		var live []string
		next := 0
		for op := 0; op < 200; op++ {
			var plan Plan
			var err error
			var what string
			p1Before, rBefore := h.P1(), h.Quotas()
			switch k := rng.Intn(10); {
			case k < 4 || len(live) == 0:
				id := fmt.Sprintf("c%d", next)
				next++
				cl := Class(rng.Intn(2))
				r := randMilli(rng, h.N)
				what = fmt.Sprintf("add %s %s %dm", id, cl, r)
				plan, err = h.Add(id, cl, r)
				if err == nil {
					live = append(live, id)
					v.Class[id] = cl
				}
			case k < 8:
				id := live[rng.Intn(len(live))]
				r := randMilli(rng, h.N)
				if rng.Intn(2) == 0 { // small moves around whole numbers
					a, _ := h.Get(id)
					r = max(a.R+int64(rng.Intn(401)-200), 1)
				}
				what = fmt.Sprintf("resize %s %dm", id, r)
				plan, err = h.Resize(id, r)
			default:
				i := rng.Intn(len(live))
				id := live[i]
				what = "remove " + id
				plan = h.Remove(id)
				live = append(live[:i], live[i+1:]...)
				defer delete(v.Class, id)
				delete(v.CPUs, id)
				delete(v.Milli, id)
				delete(v.Class, id)
			}
			if err != nil && !errors.Is(err, ErrNotWYSIWYG) && !errors.Is(err, ErrNoCapacity) {
				t.Fatalf("seed %d op %d %s: %v", seed, op, what, err)
			}
			if err != nil && h.Mode == BestEffort && errors.Is(err, ErrNotWYSIWYG) {
				t.Fatalf("seed %d: best-effort refused for WYSIWYG: %s", seed, what)
			}
			p1, rAfter := h.P1(), h.Quotas()
			for i, s := range plan {
				v.Apply(s)
				for j, m := range []map[int]string{p1Before, p1} {
					if bad := v.Check(m, []map[string]int64{rBefore, rAfter}[j]); len(bad) > 0 {
						t.Fatalf("seed %d op %d %s, after step %d of [%s]: %v", seed, op, what, i, plan, bad)
					}
				}
			}
			if err := h.Validate(); err != nil {
				t.Fatalf("seed %d op %d %s: %v", seed, op, what, err)
			}
			for _, id := range live {
				a, _ := h.Get(id)
				if !v.CPUs[id].Equal(h.CPUs(id)) || v.Milli[id] != a.R {
					t.Fatalf("seed %d op %d %s: files of %s say %s %dm, allocation %s %dm (plan [%s])",
						seed, op, what, id, v.CPUs[id], v.Milli[id], h.CPUs(id), a.R, plan)
				}
			}
		}
	}
}

func randMilli(rng *rand.Rand, n int) int64 {
	switch rng.Intn(3) {
	case 0:
		return int64(1+rng.Intn(n)) * Milli // whole cores
	case 1:
		return int64(1 + rng.Intn(Milli)) // a fraction
	}
	return int64(1 + rng.Intn(n*Milli))
}

// A resize inside the same shape moves no cpuset; growing by a core moves
// one core out of the C2 set before it joins the C1 set.
func TestResizeOrder(t *testing.T) {
	h := NewHost(4, Hard)
	mustAdd(t, h, "s", C2, 100)
	mustAdd(t, h, "w", C1, 1500)
	p, err := h.Resize("w", 1200)
	if err != nil || len(p) != 1 || p[0].Kind != SetQuota {
		t.Fatalf("in-place cut: %v %v", p, err)
	}
	p, err = h.Resize("w", 2500)
	if err != nil {
		t.Fatal(err)
	}
	// shrink s, grow w, raise w's quota, and nothing else (the fraction
	// stays on its core).
	if len(p) != 3 || p[0].ID != "s" || p[1].ID != "w" || p[1].Kind != SetCPUs || p[2].Kind != SetQuota {
		t.Fatalf("growth plan %s", p)
	}
	p, err = h.Resize("w", 900)
	if err != nil {
		t.Fatal(err)
	}
	// cut the quota first, then shrink w, then give s its cores back.
	if p[0].Kind != SetQuota || p[len(p)-1].ID != "s" {
		t.Fatalf("cut plan %s", p)
	}
}

func TestHysteresis(t *testing.T) {
	var hy Hysteresis
	t0 := time.Unix(0, 0)
	cur := int64(1000)
	// wavering around 1 core: 1010 lays out 2 cores at once; 990 and
	// 1010 afterwards move nothing.
	if got := hy.Target(cur, 1010, t0); got != 1010 {
		t.Fatalf("raise: %d", got)
	}
	cur = 1010
	for i := 0; i < 50; i++ {
		q := int64(990)
		if i%2 == 1 {
			q = 1010
		}
		if got := hy.Target(cur, q, t0.Add(time.Duration(i)*100*time.Millisecond)); got != cur && got != q {
			t.Fatalf("step %d: %d", i, got)
		} else {
			cur = max(cur, got)
		}
	}
	if cur != 1010 {
		t.Fatalf("layout moved to %d", cur)
	}
	// a real cut below the band goes through after Hold, not before.
	if got := hy.Target(cur, 600, t0.Add(10*time.Second)); got != cur {
		t.Fatalf("cut applied at once: %d", got)
	}
	if got := hy.Target(cur, 600, t0.Add(10*time.Second+DefaultHold)); got != 600 {
		t.Fatalf("cut not applied after hold: %d", got)
	}
	// same shape: in place, at once.
	if got := hy.Target(1800, 1300, t0); got != 1300 {
		t.Fatalf("same-shape cut: %d", got)
	}
}

// Simulate changes nothing on the host.
func TestSimulate(t *testing.T) {
	h := NewHost(4, Hard)
	mustAdd(t, h, "a", C1, 1500)
	a, err := h.Simulate(C1, 2000)
	if err != nil || len(a.P1) != 2 {
		t.Fatalf("%+v %v", a, err)
	}
	if len(h.IDs()) != 1 || h.Booked() != 1500 {
		t.Fatal("simulation booked")
	}
}

// The hysteresis at work on the allocator: a quota wavering ±80 m around
// one core every period for 60 s (600 periods) moves cpusets at every
// crossing without it, and once with it.
func TestHysteresisSavesCpusetWrites(t *testing.T) {
	writes := func(hyst bool) int {
		h := NewHost(2, Hard)
		mustAdd(t, h, "s", C2, 1)
		mustAdd(t, h, "w", C1, 1000)
		var hy Hysteresis
		layout, n := int64(1000), 0
		t0 := time.Unix(0, 0)
		for i := 0; i < 600; i++ {
			q := int64(1000 + 80*(1-2*(i%2)))
			target := q
			if hyst {
				target = hy.Target(layout, q, t0.Add(time.Duration(i)*100*time.Millisecond))
			}
			if target == layout {
				continue
			}
			p, err := h.Resize("w", target)
			if err != nil {
				t.Fatal(err)
			}
			layout = target
			n += p.CPUChanges()
		}
		return n
	}
	without, with := writes(false), writes(true)
	t.Logf("cpuset writes over 600 periods: %d without hysteresis, %d with", without, with)
	if with > 2 || without < 300 {
		t.Fatalf("cpuset writes: %d without hysteresis, %d with", without, with)
	}
}
