package allocator

import (
	"math/rand/v2"
	"testing"
)

// memHost is a daemon as the memory-credit protocol sees it: its credit,
// the limits its cgroups hold, and its session's ordered queues.
type memHost struct {
	credit  int64
	id      uint64
	serves  map[uint32]int64
	toHost  []MemCreditCmd
	toCtl   []memMsg
	applied map[Key]int64
}

type memMsg struct {
	use          bool
	id           uint64
	k            Key
	bytes, limit int64
}

func newMemHost() *memHost { return &memHost{serves: map[uint32]int64{}, applied: map[Key]int64{}} }

// Property (host-local memory credit, Escra §IV-D-2 with the answer
// taken on the host): after any sequence of joins, leaves, OOM requests
// through the controller, reclaims, credit rebalances, local uses,
// revocations, returns and disconnects, delivered in any interleaving
// that keeps each session's order, Σ memory limits + Σ credit ≤ M on the
// controller, Σ limits the cgroups hold + Σ credit the daemons hold ≤ M,
// and no daemon raises a member past its max_memory.
func TestMemCreditInvariantOverRandomSequences(t *testing.T) {
	var uses, returns, grants, viaCtl int
	defer func() {
		if uses < 1000 || returns < 100 || grants < 1000 || viaCtl < 100 {
			t.Errorf("exercised %d uses, %d returns, %d grants, %d controller grants", uses, returns, grants, viaCtl)
		}
	}()
	for seed := range uint64(80) {
		r := rand.New(rand.NewPCG(seed, 23))
		p := DefaultParams()
		p.OOMStepBytes = int64(1+r.IntN(64)) * MiB
		budget := int64(256+r.IntN(2048)) * MiB
		a, err := NewBooks("m", Budget{CPUCores: 2, MemoryBytes: budget, Sigma: r.Float64() * 0.9}, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		ackGated := seed%2 == 1
		a.AckGated = ackGated
		hosts := map[HostID]*memHost{1: newMemHost(), 2: newMemHost(), 3: newMemHost()}
		var live []Key
		next := uint32(1)
		// Controller decisions reach the cgroup at once (and are
		// acknowledged at once under AckGated): what the test checks is
		// the credit, not the acknowledgement protocol (applied_test.go).
		carry := func(ds []Decision) {
			for _, d := range ds {
				if d.MemLimit > 0 {
					hosts[d.Key.Host()].applied[d.Key] = d.MemLimit
				}
				if ackGated {
					a.Ack(d.Key, d.Gen, AckApplied)
				}
			}
		}
		send := func(cmds []MemCreditCmd) {
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
			case x < 6 && len(live) < 24:
				k := Key(uint64(h)<<32 | uint64(next))
				next++
				var maxMem int64
				if r.IntN(3) == 0 {
					maxMem = int64(64+r.IntN(512)) * MiB
				}
				ds, err := a.Join(Join{Key: k, HostMaxUs: 100000, MaxMem: maxMem})
				if err != nil {
					t.Fatal(err)
				}
				carry(ds)
				live = append(live, k)
			case x < 8 && len(live) > 0:
				i := r.IntN(len(live))
				ds, _ := a.Leave(live[i])
				delete(hosts[live[i].Host()].applied, live[i])
				carry(ds)
				live = append(live[:i], live[i+1:]...)
			case x < 9: // disconnect: queues lost, members leave, credit dropped
				var keep []Key
				for _, k := range live {
					if k.Host() == h {
						ds, _ := a.Leave(k)
						carry(ds)
					} else {
						keep = append(keep, k)
					}
				}
				live = keep
				carry(a.MemCreditDrop(h))
				hosts[h] = newMemHost()
			case x < 16 && len(live) > 0: // an OOM the host's credit did not cover
				k := live[r.IntN(len(live))]
				m := a.Member(k)
				o := a.OOM(k, m.MemLimit, m.MemLimit, int64(r.IntN(512))*4096, false)
				if o.Action == OOMGrant {
					viaCtl++
					carry([]Decision{o.Decision})
				}
			case x < 20 && len(live) > 0: // reclaim one member to usage + δ
				k := live[r.IntN(len(live))]
				m := a.Member(k)
				if m.MemLimit > 8*MiB {
					nl := m.MemLimit / 2
					if a.Reclaimed(k, nl, nl/2) {
						hosts[k.Host()].applied[k] = nl
					}
					carry(a.FillPending())
				}
			case x < 28:
				send(a.RebalanceMemCredit(r.Float64()))
			case x < 45: // the daemon reads one command
				if len(sh.toHost) > 0 {
					c := sh.toHost[0]
					sh.toHost = sh.toHost[1:]
					switch {
					case c.Revoke:
						ret := int64(0)
						if c.ID == sh.id {
							ret, sh.credit, sh.id = sh.credit, 0, 0
						}
						_ = ret
						sh.toCtl = append(sh.toCtl, memMsg{id: c.ID})
					case c.ID != sh.id && c.AddBytes == 0:
					default:
						if c.ID != sh.id {
							sh.credit, sh.id, sh.serves = 0, c.ID, map[uint32]int64{}
						}
						if c.MembersSet {
							clear(sh.serves)
							for _, mc := range c.Members {
								sh.serves[mc.Handle] = mc.MaxBytes
							}
						}
						sh.credit += c.AddBytes
						if c.AddBytes > 0 {
							grants++
						}
					}
				}
			case x < 65: // an OOM on the host, answered from credit
				var mine []Key
				for _, k := range live {
					if _, ok := sh.serves[uint32(k)]; ok && k.Host() == h {
						mine = append(mine, k)
					}
				}
				if sh.credit >= 4096 && len(mine) > 0 {
					k := mine[r.IntN(len(mine))]
					cur := sh.applied[k]
					amt := min(max(p.OOMStepBytes, 4096), sh.credit)
					if mx := sh.serves[uint32(k)]; mx > 0 {
						amt = min(amt, mx-cur)
					}
					if amt &^= 4095; amt >= 4096 && cur > 0 {
						sh.credit -= amt
						sh.applied[k] = cur + amt
						sh.toCtl = append(sh.toCtl, memMsg{use: true, id: sh.id, k: k, bytes: amt, limit: cur + amt})
					}
				}
			default: // the controller reads one daemon message
				if len(sh.toCtl) > 0 {
					msg := sh.toCtl[0]
					sh.toCtl = sh.toCtl[1:]
					if msg.use {
						d, err := a.MemCreditUse(h, msg.id, msg.k, msg.bytes, msg.limit)
						if err == ErrCreditOver {
							t.Fatalf("seed %d step %d: a daemon used more than its credit", seed, step)
						}
						if err == nil {
							uses++
						}
						carry([]Decision{d})
					} else if ds, err := a.MemCreditReturn(h, msg.id); err == nil {
						returns++
						carry(ds)
					}
				}
			}
			send(a.TakeMemCreditCmds())
			var sum, applied, held int64
			for _, m := range a.Members() {
				sum += m.MemLimit
				if m.MaxMem > 0 && hosts[m.Key.Host()].applied[m.Key] > m.MaxMem {
					t.Fatalf("seed %d step %d: member %x holds %d past its max_memory %d", seed, step, m.Key, hosts[m.Key.Host()].applied[m.Key], m.MaxMem)
				}
			}
			for _, s := range hosts {
				for _, v := range s.applied {
					applied += v
				}
				held += s.credit
			}
			if sum+a.MemCredited() > budget {
				t.Fatalf("seed %d step %d: Σ limits %d + Σ credit %d > M %d", seed, step, sum, a.MemCredited(), budget)
			}
			if applied+held > budget {
				t.Fatalf("seed %d step %d: Σ applied %d + Σ held credit %d > M %d", seed, step, applied, held, budget)
			}
		}
	}
}

func creditBooks(t *testing.T, budget int64) *Books {
	t.Helper()
	p := DefaultParams()
	p.OOMStepBytes = 16 * MiB
	a, err := NewBooks("c", Budget{CPUCores: 2, MemoryBytes: budget, Sigma: 0.5}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestMemCreditGrantUseAndReturn(t *testing.T) {
	a := creditBooks(t, 1024*MiB)
	k1, k2 := Key(1<<32|1), Key(2<<32|1)
	a.Join(Join{Key: k1, HostMaxUs: 100000})
	a.Join(Join{Key: k2, HostMaxUs: 100000, MaxMem: 300 * MiB})
	// σ = 0.5, eq. (2): 512 MiB, then 256 MiB; 256 MiB free, half of it
	// lent, split by members.
	cmds := a.RebalanceMemCredit(a.MemCreditFraction())
	if len(cmds) != 2 || a.MemCredit(1) != 64*MiB || a.MemCredit(2) != 64*MiB {
		t.Fatalf("grants %+v; credit %d, %d", cmds, a.MemCredit(1), a.MemCredit(2))
	}
	for _, c := range cmds {
		if !c.MembersSet || len(c.Members) != 1 || c.StepBytes != 16*MiB {
			t.Fatalf("a first grant names the members and the step: %+v", c)
		}
	}
	if cmds[1].Members[0].MaxBytes != 300*MiB {
		t.Fatalf("max_memory not sent: %+v", cmds[1])
	}
	if got := a.MemUnallocated(); got != 128*MiB {
		t.Fatalf("credit is counted as assigned: unallocated %d", got/MiB)
	}
	// Host 1 answered an OOM with 16 MiB from its credit.
	d, err := a.MemCreditUse(1, cmds[0].ID, k1, 16*MiB, 528*MiB)
	if err != nil || d.Gen != 0 || a.Member(k1).MemLimit != 528*MiB {
		t.Fatalf("a use the daemon reported exactly is counted without an echo: %+v %v", d, err)
	}
	if a.MemCredit(1) != 48*MiB || a.MemAllocated() != 784*MiB || a.MemUnallocated() != 128*MiB {
		t.Fatalf("a use moves credit into the limit: credit %d alloc %d free %d", a.MemCredit(1)/MiB, a.MemAllocated()/MiB, a.MemUnallocated()/MiB)
	}
	if m := a.Member(k1); m.OOMGrants != 1 || m.OOMRequests != 1 {
		t.Fatalf("a use counts as a granted OOM request: %+v", m)
	}
	// Nothing changed enough: the rebalance sends nothing.
	if cmds := a.RebalanceMemCredit(a.MemCreditFraction()); len(cmds) != 0 {
		t.Fatalf("idle rebalance sent %+v", cmds)
	}
	// Off: every credit is revoked; the return gives it back.
	rv := a.RebalanceMemCredit(0)
	if len(rv) != 2 || !rv[0].Revoke || !a.MemCreditRevoking() {
		t.Fatalf("revokes %+v", rv)
	}
	if _, err := a.MemCreditReturn(1, rv[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MemCreditReturn(2, rv[1].ID); err != nil {
		t.Fatal(err)
	}
	if a.MemCredited() != 0 || a.MemUnallocated() != 240*MiB {
		t.Fatalf("returns refill the pool: credited %d free %d", a.MemCredited(), a.MemUnallocated()/MiB)
	}
}

func TestMemCreditUseIsClampedAndChecked(t *testing.T) {
	a := creditBooks(t, 1024*MiB)
	k1, k2 := Key(1<<32|1), Key(2<<32|1)
	a.Join(Join{Key: k1, HostMaxUs: 100000})
	a.Join(Join{Key: k2, HostMaxUs: 100000, MaxMem: 260 * MiB})
	cmds := a.RebalanceMemCredit(1)
	id1, id2 := cmds[0].ID, cmds[1].ID
	if _, err := a.MemCreditUse(2, id2, k1, MiB, 0); err != ErrCreditOwner {
		t.Fatalf("another host's member: %v", err)
	}
	if d, err := a.MemCreditUse(1, id1+100, k1, MiB, 0); err != ErrNoCredit || d.MemLimit != 512*MiB {
		t.Fatalf("an unknown credit reasserts the counted limit: %+v %v", d, err)
	}
	before := a.MemCredited() + a.MemAllocated()
	d, err := a.MemCreditUse(1, id1, k1, 10*1024*MiB, 1<<40)
	if err != ErrCreditOver || a.MemCredit(1) != 0 || d.MemLimit != 512*MiB+128*MiB {
		t.Fatalf("a use beyond the credit is clamped to it: %+v %v credit %d", d, err, a.MemCredit(1))
	}
	if a.MemCredited()+a.MemAllocated() != before {
		t.Fatal("a use must not change Σ limits + Σ credit")
	}
	if d, _ := a.MemCreditUse(2, id2, k2, 64*MiB, 320*MiB); d.MemLimit != 260*MiB {
		t.Fatalf("max_memory holds on the controller too: %+v", d)
	}
}

func TestMemCreditRevokedWhenThePoolIsShort(t *testing.T) {
	a := creditBooks(t, 512*MiB)
	k1 := Key(1<<32 | 1)
	a.Join(Join{Key: k1, HostMaxUs: 100000}) // 256 MiB; 256 free
	cmds := a.RebalanceMemCredit(1)          // all of it lent to host 1
	if a.MemCredit(1) != 256*MiB || a.MemUnallocated() != 0 {
		t.Fatalf("credit %d free %d", a.MemCredit(1), a.MemUnallocated())
	}
	// Host 1's credit did not serve this OOM (say, a new member): the
	// controller has no pool, so it denies and asks the credit back.
	if o := a.OOM(k1, 256*MiB, 256*MiB, 0, false); o.Action != OOMDeny {
		t.Fatalf("outcome %+v", o)
	}
	rv := a.TakeMemCreditCmds()
	if len(rv) != 1 || !rv[0].Revoke || rv[0].ID != cmds[0].ID {
		t.Fatalf("revocations %+v", rv)
	}
	if got := a.RebalanceMemCredit(1); len(got) != 0 {
		t.Fatalf("a revoking credit is not granted again before its return: %+v", got)
	}
	a.MemCreditReturn(1, rv[0].ID)
	if o := a.OOM(k1, 256*MiB, 256*MiB, 0, false); o.Action != OOMGrant || o.Decision.MemLimit != 272*MiB {
		t.Fatalf("after the return the controller grants its step: %+v", o)
	}
	// A join the pool cannot give its share revokes too.
	a.RebalanceMemCredit(1)
	a.Join(Join{Key: Key(2<<32 | 1), HostMaxUs: 100000})
	if rv := a.TakeMemCreditCmds(); len(rv) != 1 || !rv[0].Revoke {
		t.Fatalf("a short join revokes: %+v", rv)
	}
}

func TestMemCreditFollowsMembersAndPolicy(t *testing.T) {
	a := creditBooks(t, 1024*MiB)
	k1 := Key(1<<32 | 1)
	a.Join(Join{Key: k1, HostMaxUs: 100000})
	a.RebalanceMemCredit(0.5)
	k2 := Key(1<<32 | 2)
	a.Join(Join{Key: k2, HostMaxUs: 100000, MaxMem: 200 * MiB})
	cmds := a.RebalanceMemCredit(0.5)
	var listed bool
	for _, c := range cmds {
		if c.Host == 1 && c.MembersSet && len(c.Members) == 2 {
			listed = true
		}
	}
	if !listed {
		t.Fatalf("a new member is sent to its host: %+v", cmds)
	}
	// The host's members leave: its credit is revoked.
	a.Leave(k1)
	a.Leave(k2)
	a.Join(Join{Key: Key(2<<32 | 1), HostMaxUs: 100000})
	var revoked bool
	for _, c := range a.RebalanceMemCredit(0.5) {
		revoked = revoked || (c.Host == 1 && c.Revoke)
	}
	if !revoked {
		t.Fatal("a host without members keeps its credit")
	}
	pa, _ := NewBooks("p", Budget{CPUCores: 1, MemoryBytes: gib}, DefaultParams(), EscraPaper{})
	if pa.MemCreditFraction() != 0 {
		t.Fatal("escra-paper keeps the paper's rule: every OOM asks the controller")
	}
}
