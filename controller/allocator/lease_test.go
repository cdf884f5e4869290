package allocator

import (
	"math/rand/v2"
	"testing"
)

// simHost is a daemon as the lease protocol sees it: its local credit and
// the ordered message queues of its TCP session in both directions.
type simHost struct {
	credit  int64
	leaseID uint64
	toHost  []LeaseCmd // controller → daemon, in order
	toCtl   []simMsg   // daemon → controller, in order
}

type simMsg struct {
	use     bool
	id      uint64
	k       Key
	us      int64
	return_ bool
}

// Property (host-local leases): after any sequence of joins, leaves, statistics,
// throttle events, lease rebalances, local uses, revocations, returns and
// disconnects, delivered in any interleaving that keeps each session's
// order, Σ quotas + Σ leases ≤ Ω on the controller, and no daemon ever
// holds more credit than the controller counts for its host.
func TestLeaseInvariantOverRandomSequences(t *testing.T) {
	var uses, returns, grants int
	defer func() {
		// The sequences must exercise the protocol, not only idle around it.
		if uses < 1000 || returns < 100 || grants < 1000 {
			t.Errorf("exercised %d uses, %d returns, %d grants", uses, returns, grants)
		}
	}()
	for seed := range uint64(80) {
		r := rand.New(rand.NewPCG(seed, 11))
		p := DefaultParams()
		p.Window = 1 + r.IntN(10)
		a, err := NewBooks("l", Budget{CPUCores: 0.3 + r.Float64()*4, MemoryBytes: gib}, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		hosts := map[HostID]*simHost{1: {}, 2: {}, 3: {}}
		seq := map[Key]uint64{}
		var live []Key
		next := uint32(1)
		send := func(cmds []LeaseCmd) {
			for _, c := range cmds {
				if h := hosts[c.Host]; h != nil {
					h.toHost = append(h.toHost, c)
				}
			}
		}
		for step := range 4000 {
			h := HostID(1 + r.IntN(3))
			sh := hosts[h]
			switch x := r.IntN(100); {
			case x < 5 && len(live) < 24:
				k := Key(uint64(h)<<32 | uint64(next))
				next++
				if _, err := a.Join(Join{Key: k, HostMaxUs: int64(1+r.IntN(4)) * 100000}); err != nil {
					t.Fatal(err)
				}
				live = append(live, k)
			case x < 7 && len(live) > 0:
				i := r.IntN(len(live))
				a.Leave(live[i])
				live = append(live[:i], live[i+1:]...)
			case x < 8: // disconnect: the session's queues are lost, its members leave
				var keep []Key
				for _, k := range live {
					if k.Host() == h {
						a.Leave(k)
					} else {
						keep = append(keep, k)
					}
				}
				live = keep
				a.LeaseDrop(h)
				hosts[h] = &simHost{}
			case x < 40 && len(live) > 0:
				k := live[r.IntN(len(live))]
				m := a.Member(k)
				s := seq[k]
				seq[k] = s + 1
				a.CPU(k, Stat{Seq: s, QuotaUs: m.QuotaUs, PeriodUs: 100000,
					UnusedUs: int64(r.IntN(int(m.QuotaUs) + 1)), Throttled: r.IntN(3) == 0})
			case x < 48 && len(live) > 0:
				k := live[r.IntN(len(live))]
				a.Throttle(k, seq[k])
			case x < 55:
				send(a.RebalanceLeases(r.Float64()))
			case x < 70: // the daemon reads one command
				if len(sh.toHost) > 0 {
					c := sh.toHost[0]
					sh.toHost = sh.toHost[1:]
					switch {
					case c.Revoke && c.ID == sh.leaseID:
						sh.toCtl = append(sh.toCtl, simMsg{return_: true, id: c.ID})
						sh.credit, sh.leaseID = 0, 0
					case !c.Revoke:
						if c.ID != sh.leaseID {
							sh.credit, sh.leaseID = 0, c.ID
						}
						sh.credit += c.AddUs
						grants++
					}
				}
			case x < 80: // the daemon spends credit on one of its members
				var mine []Key
				for _, k := range live {
					if k.Host() == h {
						mine = append(mine, k)
					}
				}
				if sh.credit > 0 && len(mine) > 0 {
					us := 1 + r.Int64N(sh.credit)
					sh.credit -= us
					sh.toCtl = append(sh.toCtl, simMsg{use: true, id: sh.leaseID, k: mine[r.IntN(len(mine))], us: us})
				}
			default: // the controller reads one daemon message
				if len(sh.toCtl) > 0 {
					msg := sh.toCtl[0]
					sh.toCtl = sh.toCtl[1:]
					if msg.use {
						d, err := a.LeaseUse(h, msg.id, msg.k, msg.us)
						if err == ErrLeaseOver {
							t.Fatalf("seed %d step %d: a daemon used more than its lease", seed, step)
						}
						if d.Gen != 0 {
							uses++
						}
					} else if _, err := a.LeaseReturn(h, msg.id); err == nil {
						returns++
					}
				}
			}
			send(a.TakeLeaseCmds())
			var sq int64
			for _, m := range a.Members() {
				sq += m.QuotaUs
			}
			if sq+a.LeasedUs() > a.OmegaUs() {
				t.Fatalf("seed %d step %d: Σ quotas %d + Σ leases %d > Ω %d", seed, step, sq, a.LeasedUs(), a.OmegaUs())
			}
			for hid, s := range hosts {
				var inflight int64
				for _, msg := range s.toCtl {
					if msg.use {
						inflight += msg.us
					}
				}
				if s.credit+inflight > a.LeaseUs(hid) && s.leaseID != 0 && a.leases[hid] != nil && a.leases[hid].id == s.leaseID {
					t.Fatalf("seed %d step %d: host %d holds %d (+%d in flight) but the controller counts %d",
						seed, step, hid, s.credit, inflight, a.LeaseUs(hid))
				}
			}
		}
	}
}

func TestLeaseUseRejectsStrangers(t *testing.T) {
	a, _ := NewBooks("l", Budget{CPUCores: 1, MemoryBytes: gib}, DefaultParams(), nil)
	k := Key(1<<32 | 1)
	if _, err := a.Join(Join{Key: k, HostMaxUs: 200000}); err != nil {
		t.Fatal(err)
	}
	for s := range uint64(15) { // idles down, freeing most of Ω
		q := a.Member(k).QuotaUs
		a.CPU(k, Stat{Seq: s, QuotaUs: q, PeriodUs: 100000, UnusedUs: q - 10000, UsageUs: 10000})
	}
	cmds := a.RebalanceLeases(0.5)
	if len(cmds) != 1 || cmds[0].Host != 1 || cmds[0].AddUs <= 0 {
		t.Fatalf("rebalance %+v", cmds)
	}
	id := cmds[0].ID
	if _, err := a.LeaseUse(2, id, k, 1000); err != ErrNoLease {
		t.Fatalf("use by a host without a lease: %v", err)
	}
	if _, err := a.LeaseUse(1, id+1, k, 1000); err != ErrNoLease {
		t.Fatalf("use of another lease id: %v", err)
	}
	q := a.Member(k).QuotaUs
	d, err := a.LeaseUse(1, id, k, cmds[0].AddUs+5000)
	if err != ErrLeaseOver || d.QuotaUs != q+cmds[0].AddUs || a.LeaseUs(1) != 0 {
		t.Fatalf("overuse: %+v %v, lease left %d", d, err, a.LeaseUs(1))
	}
}

// Only a policy that reacts inside a period lends leases: a host's lease
// raise is that reaction taken locally, and escra-paper waits for the
// period's end.
func TestLeasesOnlyForInPeriodPolicies(t *testing.T) {
	p := DefaultParams()
	p.LeaseFraction = 0.5
	esc, _ := NewBooks("e", Budget{CPUCores: 1, MemoryBytes: gib}, p, Escra{})
	paper, _ := NewBooks("p", Budget{CPUCores: 1, MemoryBytes: gib}, p, EscraPaper{})
	if esc.LeaseFraction() != 0.5 || paper.LeaseFraction() != 0 {
		t.Fatalf("lease fraction escra %v, escra-paper %v", esc.LeaseFraction(), paper.LeaseFraction())
	}
}
