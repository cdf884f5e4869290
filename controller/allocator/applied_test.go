package allocator

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// simCgroup is one container's cgroup as its daemon keeps it.
type simCgroup struct {
	quota, mem, usage int64
	ownQ, ownM        int64 // its own limits (Docker's): what a silent escrad falls back to
	gen               uint64
	gone              bool
}

type simUpdate struct {
	handle uint32
	d      Decision
}

type simAck struct {
	k   Key
	gen uint64
	r   AckResult
}

// simDaemon is one host's escrad: its cgroups, and the ordered queues of
// its session (decisions in, acks out).
type simDaemon struct {
	sess    uint32 // 0: no session
	stopped bool   // SIGSTOP or partitioned: processes nothing
	cg      map[uint32]*simCgroup
	in      []simUpdate
	out     []simAck
}

// apply is escrad's write (daemon/limits): a stale generation is refused;
// the CPU quota is written before the memory limit; a memory limit below
// usage is refused, leaving the old one (and the quota already written).
func (h *simDaemon) apply(u simUpdate) {
	c := h.cg[u.handle]
	k := Key(uint64(h.sess)<<32 | uint64(u.handle))
	if c == nil || c.gone {
		return
	}
	if u.d.Gen < c.gen {
		h.out = append(h.out, simAck{k, u.d.Gen, AckRefused})
		return
	}
	c.gen = u.d.Gen
	if u.d.QuotaUs != 0 {
		c.quota = u.d.QuotaUs
	}
	if u.d.MemLimit != 0 {
		if u.d.MemLimit < c.usage {
			h.out = append(h.out, simAck{k, u.d.Gen, AckRefused})
			return
		}
		c.mem = u.d.MemLimit
	}
	h.out = append(h.out, simAck{k, u.d.Gen, AckApplied})
}

func anyStopped(hs []*simDaemon) bool {
	for _, h := range hs {
		if h.stopped {
			return true
		}
	}
	return false
}

// Property (no budget violations): after any sequence of joins, statistics, OOM
// grants, reclaims, cuts, acknowledgements, refusals (memory below
// usage), stopped and partitioned daemons, disconnects, rejoins and
// controller restarts, Σ of the limits in the cgroups of an app's live
// containers never exceeds its budget, and the controller's counted total
// bounds it: a daemon may have applied the old or the new limit of every
// decision it has not acknowledged, and the pools count the larger.
func TestAppliedLimitsNeverExceedBudget(t *testing.T) {
	var acks, refusals, rejoins, restarts, adopted, lost, silent int
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 12))
		p := DefaultParams()
		p.Window = 1 + r.IntN(6)
		b := Budget{CPUCores: 0.5 + r.Float64()*3, MemoryBytes: 256*MiB + r.Int64N(gib), Sigma: r.Float64() * 0.3}
		newCtl := func() *Books {
			a, err := NewBooks("x", b, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			a.AckGated = true
			return a
		}
		a := newCtl()
		hosts := []*simDaemon{{cg: map[uint32]*simCgroup{}}, {cg: map[uint32]*simCgroup{}}, {cg: map[uint32]*simCgroup{}}}
		nextSess := uint32(1)
		nextHandle := uint32(1)
		seq := map[Key]uint64{}
		hostOf := func(k Key) *simDaemon {
			for _, h := range hosts {
				if h.sess != 0 && HostID(h.sess) == k.Host() {
					return h
				}
			}
			return nil
		}
		send := func(ds []Decision) {
			for _, d := range ds {
				if h := hostOf(d.Key); h != nil {
					h.in = append(h.in, simUpdate{uint32(uint64(d.Key)), d})
				}
			}
		}
		holdID := func(hi int, handle uint32) string { return fmt.Sprintf("%d/%d", hi, handle) }
		// connect opens a session for host hi and registers its live
		// containers with the limits their cgroups hold.
		connect := func(hi int) {
			h := hosts[hi]
			h.sess = nextSess
			nextSess++
			h.in, h.out = nil, nil
			for handle, c := range h.cg {
				if c.gone {
					continue
				}
				c.gen = 0 // escrad resets generations for a new session
				a.Unhold(holdID(hi, handle))
				k := Key(uint64(h.sess)<<32 | uint64(handle))
				ds, err := a.Join(Join{Key: k, HostMaxUs: 200000, MemUsage: c.usage, CurQuotaUs: c.quota, CurMem: c.mem, OwnQuotaUs: c.ownQ, OwnMem: c.ownM})
				if err != nil {
					t.Fatal(err)
				}
				if m := a.Member(k); m.QuotaUs == c.quota && m.MemLimit == c.mem {
					adopted++
				}
				send(ds)
				rejoins++
			}
		}
		// disconnect ends host hi's session: the daemon may still apply
		// what reached it; the controller holds the members' shares.
		disconnect := func(hi int, controllerKnows bool) {
			h := hosts[hi]
			if h.sess == 0 {
				return
			}
			n := r.IntN(len(h.in) + 1)
			for _, u := range h.in[:n] {
				h.apply(u)
			}
			if controllerKnows {
				for handle := range h.cg {
					k := Key(uint64(h.sess)<<32 | uint64(handle))
					if a.Member(k) != nil {
						ds, _ := a.LeaveHeld(k, holdID(hi, handle))
						send(ds)
					}
				}
			}
			h.sess, h.in, h.out = 0, nil, nil
		}
		for hi := range hosts {
			connect(hi)
		}
		for step := range 2500 {
			hi := r.IntN(len(hosts))
			h := hosts[hi]
			switch x := r.IntN(100); {
			case x < 8 && h.sess != 0 && len(h.cg) < 4: // a new container
				cpuPool, memPool := a.CPUUnallocatedUs(), a.MemUnallocated()
				if cpuPool < 1000 || memPool < 8*MiB {
					continue
				}
				c := &simCgroup{quota: 1000 + r.Int64N(min(cpuPool, 200000)-999), mem: 4*MiB + r.Int64N(memPool-4*MiB+1)}
				c.usage = r.Int64N(c.mem / 2)
				c.ownQ, c.ownM = c.quota, c.mem
				handle := nextHandle
				nextHandle++
				h.cg[handle] = c
				k := Key(uint64(h.sess)<<32 | uint64(handle))
				ds, err := a.Join(Join{Key: k, HostMaxUs: 200000, MemUsage: c.usage, CurQuotaUs: c.quota, CurMem: c.mem, OwnQuotaUs: c.ownQ, OwnMem: c.ownM})
				if err != nil {
					t.Fatal(err)
				}
				send(ds)
			case x < 10: // a container goes away (its cgroup with it)
				for handle, c := range h.cg {
					if c.gone {
						continue
					}
					c.gone = true
					delete(h.cg, handle)
					a.Unhold(holdID(hi, handle))
					if h.sess != 0 {
						k := Key(uint64(h.sess)<<32 | uint64(handle))
						ds, _ := a.Leave(k)
						send(ds)
					}
					break
				}
			case x < 40 && h.sess != 0: // a period's statistic
				for handle, c := range h.cg {
					k := Key(uint64(h.sess)<<32 | uint64(handle))
					if c.gone || a.Member(k) == nil {
						continue
					}
					seq[k]++
					th := r.IntN(2) == 0
					unused := int64(0)
					if !th {
						unused = r.Int64N(max(c.quota, 1))
					}
					d, err := a.CPU(k, Stat{Seq: seq[k], QuotaUs: c.quota, PeriodUs: p.PeriodUs(), UnusedUs: unused, Throttled: th, UsageUs: c.quota - unused})
					if err == nil && d.Gen != 0 {
						send([]Decision{d})
					}
				}
			case x < 50 && h.sess != 0: // memory grows to the limit: OOM request
				for handle, c := range h.cg {
					k := Key(uint64(h.sess)<<32 | uint64(handle))
					if c.gone || a.Member(k) == nil {
						continue
					}
					c.usage = c.mem
					o := a.OOM(k, c.usage, c.mem, 4*MiB, false)
					if o.Action == OOMGrant && o.Decision.Gen != 0 {
						send([]Decision{o.Decision})
					}
					break
				}
			case x < 56 && h.sess != 0 && !h.stopped: // reclaim (§IV-C) on a live daemon
				for handle, c := range h.cg {
					k := Key(uint64(h.sess)<<32 | uint64(handle))
					if c.gone || a.Member(k) == nil {
						continue
					}
					c.usage = r.Int64N(c.mem + 1)
					if nl := c.usage + p.SafeMarginBytes; c.mem > nl {
						c.mem = nl
						a.Reclaimed(k, nl, c.usage)
					}
				}
			case x < 75 && h.sess != 0 && !h.stopped && len(h.in) > 0: // the daemon applies
				n := 1 + r.IntN(len(h.in))
				for _, u := range h.in[:n] {
					h.apply(u)
				}
				h.in = h.in[n:]
			case x < 88 && h.sess == 0: // a silent escrad falls back to its own limits
				// Once the controller's books balance (the cuts that make
				// room for what it holds are acknowledged: escrad's
				// --restore-after is seconds, cuts land in milliseconds),
				// the outage path raises memory to its own limit on an OOM
				// and the put-back writes its own limits (memory only when
				// usage fits). The hold covers both.
				if a.CountedCPUUs() > a.OmegaUs() || a.CountedMem() > b.MemoryBytes {
					continue
				}
				for _, c := range h.cg {
					if c.gone {
						continue
					}
					if r.IntN(2) == 0 { // an OOM no controller answers
						c.usage = c.mem
						c.mem = max(c.mem, c.ownM)
					} else { // --restore-after passed
						c.quota = c.ownQ
						if c.usage <= c.ownM {
							c.mem = c.ownM
						}
					}
					silent++
				}
			case x < 90 && h.sess != 0 && len(h.out) > 0: // an ack reaches the controller
				n := 1 + r.IntN(len(h.out))
				for _, ak := range h.out[:n] {
					if r.IntN(20) == 0 {
						lost++ // timed out: the controller never learns
						continue
					}
					acks++
					if ak.r == AckRefused {
						refusals++
					}
					if a.Ack(ak.k, ak.gen, ak.r) {
						send(a.Redistribute())
					}
				}
				h.out = h.out[n:]
			case x < 93: // SIGSTOP / SIGCONT, or a partition and its heal
				h.stopped = !h.stopped
			case x < 96 && h.sess != 0: // the session dies (heartbeat timeout, escrad SIGKILL)
				disconnect(hi, true)
			case x < 98 && h.sess == 0 && !h.stopped: // escrad reconnects
				connect(hi)
			case x < 99 && !anyStopped(hosts): // controller SIGKILL and restart: rebuilt from rejoins
				// (with a daemon stopped at the same time the new controller
				// cannot know its limits: not covered, docs/security.md)
				for i := range hosts {
					disconnect(i, false)
				}
				a = newCtl()
				restarts++
				for _, i := range r.Perm(len(hosts)) {
					if !hosts[i].stopped {
						connect(i)
					}
				}
			}
			var cpu, mem int64
			for _, hh := range hosts {
				for _, c := range hh.cg {
					if !c.gone {
						cpu += c.quota
						mem += c.mem
					}
				}
			}
			if cpu > a.OmegaUs() || mem > b.MemoryBytes {
				t.Fatalf("seed %d step %d: applied Σ quota %d µs (Ω %d), Σ memory %d (budget %d)", seed, step, cpu, a.OmegaUs(), mem, b.MemoryBytes)
			}
			if cpu > a.CountedCPUUs() || mem > a.CountedMem() {
				t.Fatalf("seed %d step %d: applied Σ quota %d µs, memory %d above what the controller counts (%d µs, %d)",
					seed, step, cpu, mem, a.CountedCPUUs(), a.CountedMem())
			}
		}
	}
	if acks < 5000 || rejoins < 200 || restarts < 30 || adopted < 100 || silent < 200 {
		t.Errorf("exercised %d acks, %d refusals, %d rejoins, %d restarts, %d adopted, %d silent fall-backs", acks, refusals, rejoins, restarts, adopted, silent)
	}
	t.Logf("%d acks (%d lost), %d refusals, %d rejoins, %d restarts, %d adopted, %d silent fall-backs", acks, lost, refusals, rejoins, restarts, adopted, silent)
}

func gatedApp(t *testing.T, cores float64, mem int64) *Books {
	t.Helper()
	a := newApp(t, cores, mem, 0)
	a.AckGated = true
	return a
}

// A cut frees its runtime only once acknowledged: a newcomer's share
// waits for it (a stopped daemon cannot apply the cut), then comes with
// Redistribute.
func TestCutFreedOnlyAfterAck(t *testing.T) {
	a := gatedApp(t, 1, gib)
	k1, k2 := Key(1<<32|1), Key(2<<32|1)
	ds, _ := a.Join(Join{Key: k1, HostMaxUs: 200000})
	if len(ds) != 1 || ds[0].QuotaUs != 100000 {
		t.Fatalf("first join: %+v", ds)
	}
	a.Ack(k1, ds[0].Gen, AckApplied)
	ds, _ = a.Join(Join{Key: k2, HostMaxUs: 200000})
	var cut Decision
	for _, d := range ds {
		if d.Key == k1 {
			cut = d
		}
		if d.Key == k2 && d.QuotaUs != 0 {
			t.Fatalf("newcomer given %d µs before the cut was acknowledged", d.QuotaUs)
		}
	}
	if cut.QuotaUs != 50000 {
		t.Fatalf("cut: %+v", ds)
	}
	if got := a.CountedCPUUs(); got != 100000 {
		t.Fatalf("counted %d µs, want the old 100000 until acknowledged", got)
	}
	if a.Ack(k1, cut.Gen, AckRefused) {
		t.Fatal("a refused cut freed runtime")
	}
	if got := a.CPUUnallocatedUs(); got != 0 {
		t.Fatalf("unallocated %d after a refused cut", got)
	}
	// The next decision for k1 carries the cut again (coalesced, newer gen).
	d := a.decide(a.members[k1], 50001, 0, ReasonRebalance)
	if !a.Ack(k1, d.Gen, AckApplied) {
		t.Fatal("acknowledged cut did not free runtime")
	}
	ds = a.Redistribute()
	if len(ds) != 1 || ds[0].Key != k2 || ds[0].QuotaUs != 49999 {
		t.Fatalf("redistribute: %+v", ds)
	}
}

// A refused memory cut (escrad: below usage) leaves the old limit
// counted, and the target goes back to it.
func TestRefusedMemoryCutStaysCounted(t *testing.T) {
	a := gatedApp(t, 1, 256*MiB)
	k1, k2 := Key(1<<32|1), Key(2<<32|1)
	ds, _ := a.Join(Join{Key: k1, HostMaxUs: 100000, CurQuotaUs: 50000, CurMem: 200 * MiB})
	a.Ack(k1, ds[0].Gen, AckApplied)
	ds, _ = a.Join(Join{Key: k2, HostMaxUs: 100000, CurQuotaUs: 50000, CurMem: 100 * MiB})
	var d2 Decision
	for _, d := range ds {
		if d.Key == k2 {
			d2 = d
		}
	}
	if d2.MemLimit != 56*MiB {
		t.Fatalf("newcomer whose limit does not fit: %+v, want a cut to the 56 MiB left", ds)
	}
	if got := a.CountedMem(); got != 300*MiB {
		t.Fatalf("counted %d MiB, want 300 (both cgroups as they are)", got/MiB)
	}
	a.Ack(k2, d2.Gen, AckRefused)
	if m := a.Member(k2); m.MemLimit != 100*MiB || a.CountedMem() != 300*MiB {
		t.Fatalf("after the refusal: target %d MiB, counted %d MiB", m.MemLimit/MiB, a.CountedMem()/MiB)
	}
	// Reclaim brings it back within the budget, as the daemon reports it.
	a.Reclaimed(k1, 120*MiB, 100*MiB)
	if got := a.CountedMem(); got != 220*MiB {
		t.Fatalf("after reclaim: counted %d MiB", got/MiB)
	}
}

// After a controller restart the first container to rejoin keeps its
// limits (they fit) instead of taking the whole budget (eq. (2) with
// λ = 1), so the second's limits still fit when it rejoins.
func TestRejoinAdoptsCurrentLimits(t *testing.T) {
	a := gatedApp(t, 1, 512*MiB)
	k1, k2 := Key(3<<32|1), Key(3<<32|2)
	if ds, _ := a.Join(Join{Key: k1, HostMaxUs: 200000, CurQuotaUs: 30000, CurMem: 100 * MiB}); len(ds) != 1 || ds[0].QuotaUs != 30000 || ds[0].MemLimit != 100*MiB {
		t.Fatalf("first rejoin: %+v", ds)
	}
	if ds, _ := a.Join(Join{Key: k2, HostMaxUs: 200000, CurQuotaUs: 70000, CurMem: 400 * MiB}); len(ds) != 1 || ds[0].QuotaUs != 70000 || ds[0].MemLimit != 400*MiB {
		t.Fatalf("second rejoin: %+v", ds)
	}
	if a.CountedCPUUs() != 100000 || a.CountedMem() != 500*MiB {
		t.Fatalf("counted %d µs, %d MiB", a.CountedCPUUs(), a.CountedMem()/MiB)
	}
}

// While raises are held (a controller that just started: hosts that have
// not rejoined may hold what the pools seem to have) nothing comes out of
// the pools: no throttle raise, no OOM grant, no lease; cuts go on.
func TestHoldRaises(t *testing.T) {
	a := gatedApp(t, 1, 512*MiB)
	a.HoldRaises = true
	k := Key(1<<32 | 1)
	if ds, _ := a.Join(Join{Key: k, HostMaxUs: 200000, CurQuotaUs: 30000, CurMem: 100 * MiB}); len(ds) != 1 || ds[0].QuotaUs != 30000 {
		t.Fatalf("rejoin: %+v", ds)
	}
	for i := range uint64(5) {
		if d, _ := a.CPU(k, stat(i+1, 30000, 0, true)); d.QuotaUs > 30000 {
			t.Fatalf("throttled member raised to %d µs while raises are held", d.QuotaUs)
		}
	}
	if ds, _ := a.Throttle(k, 7); len(ds) != 0 {
		t.Fatalf("throttle event raised: %+v", ds)
	}
	if o := a.OOM(k, 100*MiB, 100*MiB, 4096, false); o.Action != OOMDeny {
		t.Fatalf("OOM while raises are held: %+v", o)
	}
	if cmds := a.RebalanceLeases(0.5); len(cmds) != 0 {
		t.Fatalf("leases while raises are held: %+v", cmds)
	}
	a.HoldRaises = false
	if d, _ := a.CPU(k, stat(6, 30000, 0, true)); d.QuotaUs <= 30000 {
		t.Fatalf("no raise after the hold: %+v", d)
	}
}
