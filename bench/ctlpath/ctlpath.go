// Package ctlpath drives the controller's per-period path (controller/app
// around controller/allocator, as the UDP reader calls it) and its OOM
// verdicts in one process, without sockets, for Go benchmarks whose
// allocations per operation are the measure (make bench-controller
// measures the real process).
package ctlpath

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Host is an app.Host that acknowledges every update when woken, as a
// daemon's ack arrives after the writer sent the envelope, and counts
// verdicts. Updates wait until Wake, which runs without the app's lock.
type Host struct {
	mu       sync.Mutex
	queued   []session.Update
	spare    []session.Update
	waking   bool
	quota    map[uint32]int64
	Verdicts int
	Granted  int
	Reason   string // the last denial's
}

func (h *Host) Push(u session.Update) { h.Queue(u) }

func (h *Host) Queue(u session.Update) {
	h.mu.Lock()
	h.queued = append(h.queued, u)
	if u.QuotaUs > 0 {
		h.quota[u.Handle] = u.QuotaUs
	}
	h.mu.Unlock()
}

// Wake acknowledges what is queued, and what the acknowledgements queue.
func (h *Host) Wake() {
	h.mu.Lock()
	if h.waking {
		h.mu.Unlock()
		return // the outer Wake takes what this one would
	}
	h.waking = true
	for len(h.queued) > 0 {
		q := h.queued
		h.queued = h.spare[:0]
		h.mu.Unlock()
		for i := range q {
			q[i].Done(nil)
		}
		clear(q)
		h.mu.Lock()
		h.spare = q[:0]
	}
	h.waking = false
	h.mu.Unlock()
}

// Reclaim sets every limit to usage + δ (§IV-C); every member uses
// Usage bytes.
func (h *Host) Reclaim(handles []uint32, margin uint64, cb func(*pb.ReclaimResult, error)) {
	res := &pb.ReclaimResult{}
	for _, hd := range handles {
		res.Reclaimed = append(res.Reclaimed, &pb.ReclaimResult_Reclaimed{Handle: hd, UsageBytes: Usage, NewLimitBytes: int64(Usage + margin)})
	}
	go cb(res, nil)
}

// Usage is every member's memory usage.
const Usage = 100 << 20

func (h *Host) Verdict(_ uint64, v *pb.OomVerdict, _ time.Time) {
	h.mu.Lock()
	h.Verdicts++
	if v.Granted {
		h.Granted++
	} else {
		h.Reason = v.Reason
	}
	h.mu.Unlock()
}

func (h *Host) Lease(*pb.CpuLease) {}

func (h *Host) quotaOf(handle uint32) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.quota[handle]
}

type counters struct{ decisions, bad *int }

func (c counters) Decision(string)    { *c.decisions++ }
func (c counters) BadStat(string)     { *c.bad++ }
func (counters) ThrottleEvent(string) {}
func (counters) Lease(string)         {}

// Rig is one app of Members members on one Host.
type Rig struct {
	App  *app.App
	Host *Host
	// PerDatagram stats are decided between two Wakes (the UDP reader
	// wakes the host once per datagram).
	PerDatagram int

	// Decisions and BadStats the app counted (limit updates, verdicts).
	Decisions, BadStats int

	keys   []allocator.Key
	demand []float64
	rnd    *rand.Rand
	seq    []uint64
	next   int
	oomReq pb.OomRequest
	oomID  uint64
}

// New starts an app of members members (0.5 core and 256 MiB each, as
// bench-loadgen's apps) with the default parameters. Stop it with Close.
func New(members int) (*Rig, error) {
	p := allocator.DefaultParams()
	r := &Rig{Host: &Host{quota: map[uint32]int64{}}, PerDatagram: 70, rnd: rand.New(rand.NewPCG(1, 2))}
	a, err := app.New("bench", allocator.Budget{CPUCores: 0.5 * float64(members), MemoryBytes: 1 << 50, Sigma: 0.2},
		p, nil, false, slog.New(slog.NewTextHandler(io.Discard, nil)), &events.Hub{}, counters{&r.Decisions, &r.BadStats})
	if err != nil {
		return nil, err
	}
	r.App = a
	for i := range members {
		k := allocator.Key(1<<32 | uint64(i+1))
		if err := a.Join(app.MemberInfo{Key: k, Host: r.Host, HostID: "sim00", Handle: uint32(i + 1),
			ContainerID: fmt.Sprintf("c%d", i), Name: fmt.Sprintf("m%d", i), HostMaxUs: 64 * p.PeriodUs(),
			MemUsage: Usage}); err != nil {
			a.Stop()
			return nil, err
		}
		r.Host.Wake() // its daemon acks before the next registration
		if i%10 == 9 {
			// The first members' bootstrap shares (eq. (2)) come back
			// by reclaim for those that found the pool empty.
			if err := r.reclaim(); err != nil {
				a.Stop()
				return nil, err
			}
		}
		r.keys = append(r.keys, k)
		r.demand = append(r.demand, 0.05+r.rnd.Float64()*0.4)
		r.seq = append(r.seq, 0)
	}
	return r, nil
}

// reclaim runs the app's periodic reclaim and waits until it is done.
func (r *Rig) reclaim() error {
	r.App.PeriodicReclaim()
	for range 1000 {
		r.Host.Wake()
		if st := r.App.Snapshot(); st.Reclaiming == 0 {
			r.Host.Wake()
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("reclaim did not end")
}

// Close stops the app.
func (r *Rig) Close() { r.App.Stop() }

// Stat decides the next member's period, as bench-loadgen's demand (a
// random walk with bursts); every PerDatagram stats the host is woken
// and acknowledges the decisions.
func (r *Rig) Stat() {
	i := r.next
	r.next = (r.next + 1) % len(r.keys)
	dm := r.demand[i] + (r.rnd.Float64()-0.5)*0.1
	if r.rnd.IntN(200) == 0 {
		dm += 0.6
	}
	dm = min(max(dm, 0.02), 1.5)
	r.demand[i] = dm
	handle := uint32(i + 1)
	q := r.Host.quotaOf(handle)
	used := int64(dm * 100_000)
	throttled := q > 0 && used > q
	if throttled {
		used = q
	}
	r.seq[i]++
	st := ingest.Stat{Handle: handle, Stat: allocator.Stat{Seq: r.seq[i], QuotaUs: q, PeriodUs: 100_000,
		UnusedUs: max(q-used, 0), Throttled: throttled, UsageUs: used}}
	r.App.CPUStat(r.keys[i], st, 1)
	if r.next%r.PerDatagram == 0 {
		r.Host.Wake()
	}
}

// OOM asks for memory for the next member and returns once its verdict
// is out (the Host acknowledges the raised limit when woken).
func (r *Rig) OOM() {
	i := r.next
	r.next = (r.next + 1) % len(r.keys)
	r.oomID++
	r.oomReq = pb.OomRequest{Handle: uint32(i + 1), UsageBytes: 1 << 30, LimitBytes: 1 << 30, PagesWanted: 16}
	r.App.OOM(r.keys[i], r.oomID, &r.oomReq, time.Now())
}
