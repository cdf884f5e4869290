// Package simdaemon is a scripted escrad peer speaking docs/protocol.md,
// for the controller's session tests and its load generator. It keeps the
// limits the controller sets, acks them, answers reclaim requests from
// simulated usage and waits for OOM verdicts. It is not a daemon.
package simdaemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/internal/auth"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// Container is the simulated state of one container.
type Container struct {
	Handle   uint32
	QuotaUs  int64
	PeriodUs uint32
	MemLimit int64
	MemUsage int64
	Gen      uint64
	Seq      uint64
}

// Daemon is one simulated host.
type Daemon struct {
	HostID    string
	SessionID uint32
	PeriodUs  uint32

	conn net.Conn
	udp  net.Conn
	wmu  sync.Mutex
	w    *wire.EnvelopeWriter

	mu      sync.Mutex
	cont    map[uint32]*Container
	waiting map[uint64]chan *pb.Envelope
	nextID  uint64
	// AckDelay delays SetLimitsAck (tests of ordering and timeouts); the
	// limits are applied at once.
	AckDelay time.Duration
	// NoAck drops SetLimits without acking.
	NoAck atomic.Bool
	// Mute stops the heartbeats (a wedged daemon whose socket stays open).
	Mute atomic.Bool
	// NoReclaim drops ReclaimRequests without an answer (a dead host).
	NoReclaim atomic.Bool
	// AnswerRevokes answers every CpuLease and MemCredit revoke at once
	// with what is left of the credit, as escrad does; unset, revokes are
	// only recorded and the test answers them (ReturnLease).
	AnswerRevokes atomic.Bool
	// HeartbeatsIn counts heartbeats the controller echoed.
	HeartbeatsIn atomic.Uint64
	// cpuPlacement answers the deployer's CpuPlacementQuery (WYSIWYG
	// §IV-D); nil: no answer, like an escrad without CPU placement.
	cpuPlacement func(*pb.CpuPlacementQuery) *pb.CpuPlacementAnswer

	batcher wire.Batcher
	bmu     sync.Mutex

	SetLimits, Updates, Reclaims, UDPBytes, UDPStats atomic.Uint64
	// LimitsTerm is the leadership term the last SetLimits was stamped with.
	LimitsTerm atomic.Uint64
	// Tap, when set, sees a copy of every telemetry datagram sent (replay tests).
	Tap func(datagram []byte)
	// OnUpdate, when set, sees every applied update (under the daemon lock).
	OnUpdate func(u *pb.LimitUpdate)
	done     chan struct{}
	Err      atomic.Value

	leases []*pb.CpuLease
	credit map[string]*Credit
	// Memory credit per app (MemCredit); Credit.Us holds bytes here.
	memCredit map[string]*Credit
}

// Credit is a host-local lease as a daemon holds it.
type Credit struct {
	ID uint64
	Us int64
}

// Dial connects, says hello and waits for the HelloAck.
func Dial(tcpAddr, hostID string, cores uint32, memBytes uint64) (*Daemon, error) {
	return DialTLS(tcpAddr, hostID, cores, memBytes, nil)
}

// DialTLS is Dial over mutual TLS (auth.ClientConfig) with authenticated
// telemetry, as escrad does; a nil cfg is plain Dial.
func DialTLS(tcpAddr, hostID string, cores uint32, memBytes uint64, cfg *tls.Config) (*Daemon, error) {
	var c net.Conn
	var err error
	if cfg != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", tcpAddr, cfg)
	} else {
		c, err = net.DialTimeout("tcp", tcpAddr, 5*time.Second)
	}
	if err != nil {
		return nil, err
	}
	d := &Daemon{HostID: hostID, conn: c, w: wire.NewEnvelopeWriter(c), cont: map[uint32]*Container{},
		waiting: map[uint64]chan *pb.Envelope{}, done: make(chan struct{})}
	if err := d.w.Write(&pb.Envelope{RequestId: 1, Body: &pb.Envelope_Hello{Hello: &pb.HostHello{
		HostId: hostID, Cores: cores, MemoryBytes: memBytes, Backend: pb.Backend_BACKEND_CGROUPFS,
		CgroupVersion: pb.CgroupVersion_CGROUP_VERSION_V1, DaemonVersion: "simdaemon"}}}); err != nil {
		c.Close()
		return nil, err
	}
	r := wire.NewEnvelopeReader(c)
	env := &pb.Envelope{}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := r.Read(env); err != nil {
		c.Close()
		return nil, err
	}
	c.SetReadDeadline(time.Time{})
	ack := env.GetHelloAck()
	if ack == nil {
		c.Close()
		return nil, fmt.Errorf("simdaemon: want HelloAck, got %v", env)
	}
	d.SessionID, d.PeriodUs = ack.SessionId, ack.PeriodUs
	if d.udp, err = net.Dial("udp", ack.TelemetryAddr); err != nil {
		c.Close()
		return nil, err
	}
	d.batcher = wire.Batcher{SessionID: d.SessionID, PeriodUs: d.PeriodUs}
	if tc, ok := c.(*tls.Conn); ok {
		key, err := auth.TelemetryKey(tc.ConnectionState(), d.SessionID)
		if err != nil {
			c.Close()
			return nil, err
		}
		d.batcher.MAC = wire.NewDatagramMAC(key)
	}
	go d.readLoop(r)
	go d.heartbeats()
	return d, nil
}

// heartbeats sends one a second, as escrad does, until the session ends.
func (d *Daemon) heartbeats() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var seq uint64
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		if d.Mute.Load() {
			continue
		}
		seq++
		d.send(&pb.Envelope{Body: &pb.Envelope_Heartbeat{Heartbeat: &pb.Heartbeat{Seq: seq, SentUnixNs: time.Now().UnixNano()}}})
	}
}

// Close ends the session.
func (d *Daemon) Close() {
	d.conn.Close()
	if d.udp != nil {
		d.udp.Close()
	}
	<-d.done
}

// Done is closed when the session ends.
func (d *Daemon) Done() <-chan struct{} { return d.done }

func (d *Daemon) send(env *pb.Envelope) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.w.Write(env)
}

// SendRaw writes bytes as they are (bad-input tests).
func (d *Daemon) SendRaw(b []byte) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	_, err := d.conn.Write(b)
	return err
}

// SendDatagram sends raw bytes over UDP (bad-input tests).
func (d *Daemon) SendDatagram(b []byte) error { _, err := d.udp.Write(b); return err }

// Register announces a container.
func (d *Daemon) Register(handle uint32, app string, quotaUs int64, memLimit, memUsage int64) error {
	return d.RegisterAs(handle, fmt.Sprintf("%s-c%d", d.HostID, handle), app, quotaUs, memLimit, memUsage)
}

// RegisterAs is Register with the container id given (a lying host's
// made-up or borrowed id, in the controller's tests).
func (d *Daemon) RegisterAs(handle uint32, containerID, app string, quotaUs int64, memLimit, memUsage int64) error {
	d.mu.Lock()
	d.cont[handle] = &Container{Handle: handle, QuotaUs: quotaUs, MemLimit: memLimit, MemUsage: memUsage}
	d.nextID++
	id := d.nextID
	d.mu.Unlock()
	return d.send(&pb.Envelope{RequestId: id, Body: &pb.Envelope_Register{Register: &pb.ContainerRegister{
		Handle: handle, ContainerId: containerID, Name: fmt.Sprintf("c%d", handle),
		App: app, Limits: &pb.Limits{CpuQuotaUs: quotaUs, CpuPeriodUs: d.PeriodUs, MemoryLimitBytes: memLimit},
		MemoryUsageBytes: uint64(memUsage)}}})
}

// Unregister removes a container.
func (d *Daemon) Unregister(handle uint32) error {
	d.mu.Lock()
	delete(d.cont, handle)
	d.mu.Unlock()
	return d.send(&pb.Envelope{Body: &pb.Envelope_Unregister{Unregister: &pb.ContainerUnregister{Handle: handle, Reason: "exited"}}})
}

// Container returns a copy of a container's simulated state.
func (d *Daemon) Container(handle uint32) (Container, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.cont[handle]
	if !ok {
		return Container{}, false
	}
	return *c, true
}

// SetUsage changes a container's simulated memory usage.
func (d *Daemon) SetUsage(handle uint32, usage int64) {
	d.mu.Lock()
	if c := d.cont[handle]; c != nil {
		c.MemUsage = usage
	}
	d.mu.Unlock()
}

// SendUsage sends a MemoryUsage snapshot of every container.
func (d *Daemon) SendUsage() error {
	mu := &pb.MemoryUsage{TakenUnixNs: time.Now().UnixNano()}
	d.mu.Lock()
	for _, c := range d.cont {
		mu.Samples = append(mu.Samples, &pb.MemoryUsage_Sample{Handle: c.Handle, UsageBytes: uint64(c.MemUsage), LimitBytes: c.MemLimit})
	}
	d.mu.Unlock()
	return d.send(&pb.Envelope{Body: &pb.Envelope_MemoryUsage{MemoryUsage: mu}})
}

// Stat is one period of one container, filled in by the caller.
type Stat struct {
	Handle    uint32
	UsageUs   int64 // demand met this period
	Throttled bool
}

// SendPeriod sends one period of stats, batched into datagrams. Quota
// and unused runtime come from the limits in force.
func (d *Daemon) SendPeriod(stats []Stat) error {
	d.bmu.Lock()
	defer d.bmu.Unlock()
	emit := func(b []byte) error {
		if d.Tap != nil {
			d.Tap(append([]byte(nil), b...))
		}
		d.UDPBytes.Add(uint64(len(b)))
		_, err := d.udp.Write(b)
		return err
	}
	recs := make([]pb.CpuStat, 0, len(stats))
	d.mu.Lock()
	for _, s := range stats {
		c := d.cont[s.Handle]
		if c == nil {
			continue // unregistered meanwhile: no record (a zero one would name handle 0)
		}
		recs = append(recs, pb.CpuStat{})
		i := len(recs) - 1
		q := c.QuotaUs
		used := min(s.UsageUs, max(q, 0))
		if q < 0 {
			used = s.UsageUs
		}
		recs[i] = pb.CpuStat{Handle: s.Handle, PeriodSeq: c.Seq, QuotaUs: q, UnusedUs: max(q-used, 0),
			Throttled: s.Throttled, UsageUs: uint64(used)}
		if s.Throttled {
			recs[i].ThrottledUs = uint64(max(s.UsageUs-used, 0))
		}
		c.Seq++
	}
	d.mu.Unlock()
	for i := range recs {
		if err := d.batcher.Add(&recs[i], emit); err != nil {
			return err
		}
	}
	d.UDPStats.Add(uint64(len(recs)))
	return d.batcher.Flush(emit)
}

// SendThrottleEvent sends a throttle event for the period in progress
// (the one the next SendPeriod reports) in a datagram of its own, as
// escrad does when nr_throttled rises mid-period.
func (d *Daemon) SendThrottleEvent(handle uint32, nrThrottled uint64) error {
	d.bmu.Lock()
	defer d.bmu.Unlock()
	d.mu.Lock()
	c := d.cont[handle]
	if c == nil {
		d.mu.Unlock()
		return fmt.Errorf("simdaemon: handle %d not registered", handle)
	}
	ev := pb.CpuStat{Handle: handle, PeriodSeq: c.Seq, QuotaUs: c.QuotaUs, NrThrottled: nrThrottled, MidPeriod: true}
	d.mu.Unlock()
	emit := func(b []byte) error {
		d.UDPBytes.Add(uint64(len(b)))
		_, err := d.udp.Write(b)
		return err
	}
	if err := d.batcher.Add(&ev, emit); err != nil {
		return err
	}
	d.UDPStats.Add(1)
	return d.batcher.Flush(emit)
}

// OOM sends an OOM request and waits for the verdict.
func (d *Daemon) OOM(handle uint32, usage, limit int64, pages uint64, timeout time.Duration) (*pb.OomVerdict, uint64, error) {
	ch := make(chan *pb.Envelope, 1)
	d.mu.Lock()
	d.nextID++
	id := d.nextID
	d.waiting[id] = ch
	d.mu.Unlock()
	if err := d.send(&pb.Envelope{RequestId: id, Body: &pb.Envelope_OomRequest{OomRequest: &pb.OomRequest{
		Handle: handle, UsageBytes: uint64(usage), LimitBytes: uint64(limit), PagesWanted: pages}}}); err != nil {
		return nil, id, err
	}
	select {
	case env := <-ch:
		if v := env.GetOomVerdict(); v != nil {
			return v, id, nil
		}
		return nil, id, fmt.Errorf("simdaemon: reply %v", env)
	case <-time.After(timeout):
		return nil, id, errors.New("simdaemon: no verdict")
	case <-d.done:
		return nil, id, errors.New("simdaemon: session closed")
	}
}

func (d *Daemon) readLoop(r *wire.EnvelopeReader) {
	defer close(d.done)
	for {
		env := &pb.Envelope{}
		if err := r.Read(env); err != nil {
			d.Err.Store(err)
			return
		}
		switch b := env.Body.(type) {
		case *pb.Envelope_SetLimits:
			d.SetLimits.Add(1)
			d.LimitsTerm.Store(env.GetTerm())
			// Applied before the next envelope is read, as escrad does: an
			// OOM verdict behind a SetLimits finds its limit in place.
			d.applyLimits(env.RequestId, b.SetLimits)
		case *pb.Envelope_Reclaim:
			d.Reclaims.Add(1)
			if !d.NoReclaim.Load() {
				d.reclaim(env.RequestId, b.Reclaim)
			}
		case *pb.Envelope_Heartbeat:
			d.HeartbeatsIn.Add(1)
		case *pb.Envelope_CpuLease:
			d.lease(b.CpuLease)
			if b.CpuLease.Revoke && d.AnswerRevokes.Load() {
				go d.ReturnLease(b.CpuLease.App, b.CpuLease.LeaseId)
			}
		case *pb.Envelope_MemCredit:
			d.keepMemCredit(b.MemCredit)
		case *pb.Envelope_CpuPlacementQuery:
			d.mu.Lock()
			f := d.cpuPlacement
			d.mu.Unlock()
			if f != nil {
				_ = d.send(&pb.Envelope{RequestId: env.RequestId, Body: &pb.Envelope_CpuPlacementAnswer{CpuPlacementAnswer: f(b.CpuPlacementQuery)}})
			}
		default:
			d.mu.Lock()
			ch := d.waiting[env.RequestId]
			delete(d.waiting, env.RequestId)
			d.mu.Unlock()
			if ch != nil {
				ch <- env
			}
		}
	}
}

func (d *Daemon) applyLimits(id uint64, sl *pb.SetLimits) {
	if d.NoAck.Load() {
		return
	}
	ack := &pb.SetLimitsAck{}
	now := time.Now().UnixNano()
	d.mu.Lock()
	for _, u := range sl.Updates {
		d.Updates.Add(1)
		c := d.cont[u.Handle]
		if c == nil {
			ack.Applied = append(ack.Applied, &pb.SetLimitsAck_Applied{Handle: u.Handle, Generation: u.Generation, Error: "no such container"})
			continue
		}
		if u.Generation > c.Gen { // an older update never overwrites a newer one
			c.Gen = u.Generation
			if q := u.Limits.GetCpuQuotaUs(); q != 0 {
				c.QuotaUs, c.PeriodUs = q, u.Limits.GetCpuPeriodUs()
			}
			if m := u.Limits.GetMemoryLimitBytes(); m != 0 {
				c.MemLimit = m
			}
			if d.OnUpdate != nil {
				d.OnUpdate(u)
			}
		}
		ack.Applied = append(ack.Applied, &pb.SetLimitsAck_Applied{Handle: u.Handle, Generation: c.Gen, AppliedUnixNs: now})
	}
	d.mu.Unlock()
	reply := &pb.Envelope{RequestId: id, Body: &pb.Envelope_SetLimitsAck{SetLimitsAck: ack}}
	if d.AckDelay > 0 {
		go func() {
			time.Sleep(d.AckDelay)
			d.send(reply)
		}()
		return
	}
	d.send(reply)
}

// lease keeps credit as escrad does: a grant with a new id replaces it.
// Revokes are only recorded: the test answers them (ReturnLease).
func (d *Daemon) lease(l *pb.CpuLease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leases = append(d.leases, l)
	if l.Revoke || l.AddUs <= 0 {
		return
	}
	if d.credit == nil {
		d.credit = map[string]*Credit{}
	}
	c := d.credit[l.App]
	if c == nil || c.ID != l.LeaseId {
		c = &Credit{ID: l.LeaseId}
		d.credit[l.App] = c
	}
	c.Us += l.AddUs
}

// keepMemCredit holds a MemCredit as escrad does (a grant with a new id
// replaces the app's credit) without ever spending it: every OOM request
// goes to the controller. A revoke is answered only with AnswerRevokes.
func (d *Daemon) keepMemCredit(mc *pb.MemCredit) {
	d.mu.Lock()
	if d.memCredit == nil {
		d.memCredit = map[string]*Credit{}
	}
	c := d.memCredit[mc.App]
	if mc.Revoke {
		var left int64
		if c != nil && c.ID == mc.CreditId {
			left = c.Us
			delete(d.memCredit, mc.App)
		}
		d.mu.Unlock()
		if d.AnswerRevokes.Load() {
			go d.send(&pb.Envelope{Body: &pb.Envelope_MemCreditReturn{MemCreditReturn: &pb.MemCreditReturn{
				App: mc.App, CreditId: mc.CreditId, RemainingBytes: left}}})
		}
		return
	}
	if mc.AddBytes > 0 {
		if c == nil || c.ID != mc.CreditId {
			c = &Credit{ID: mc.CreditId}
			d.memCredit[mc.App] = c
		}
		c.Us += mc.AddBytes
	}
	d.mu.Unlock()
}

// MemCredit is app's memory credit (Us holds its bytes).
func (d *Daemon) MemCredit(app string) Credit {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.memCredit[app]; c != nil {
		return *c
	}
	return Credit{}
}

// Leases returns every CpuLease received.
func (d *Daemon) Leases() []*pb.CpuLease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*pb.CpuLease(nil), d.leases...)
}

// Credit is app's lease credit.
func (d *Daemon) Credit(app string) Credit {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.credit[app]; c != nil {
		return *c
	}
	return Credit{}
}

// UseLease raises handle's quota by us from app's credit (any amount: a
// use beyond the credit tests the controller's clamp) and reports it.
func (d *Daemon) UseLease(app string, handle uint32, us int64) error {
	d.mu.Lock()
	var id uint64
	if c := d.credit[app]; c != nil {
		id = c.ID
		c.Us = max(c.Us-us, 0)
	}
	var q int64
	if c := d.cont[handle]; c != nil {
		c.QuotaUs += us
		q = c.QuotaUs
	}
	d.mu.Unlock()
	return d.send(&pb.Envelope{Body: &pb.Envelope_CpuLeaseUse{CpuLeaseUse: &pb.CpuLeaseUse{
		App: app, LeaseId: id, Handle: handle, AmountUs: us, QuotaUs: q}}})
}

// ReturnLease answers a revoke of lease id of app: what is left when it
// is the credit held (which is then 0), else 0.
func (d *Daemon) ReturnLease(app string, id uint64) error {
	d.mu.Lock()
	var left int64
	if c := d.credit[app]; c != nil && c.ID == id {
		left = c.Us
		delete(d.credit, app)
	}
	d.mu.Unlock()
	return d.send(&pb.Envelope{Body: &pb.Envelope_CpuLeaseReturn{CpuLeaseReturn: &pb.CpuLeaseReturn{
		App: app, LeaseId: id, RemainingUs: left}}})
}

func (d *Daemon) reclaim(id uint64, rr *pb.ReclaimRequest) {
	res := &pb.ReclaimResult{}
	margin := int64(rr.SafeMarginBytes)
	d.mu.Lock()
	apply := func(c *Container) {
		if c.MemLimit > c.MemUsage+margin {
			old := c.MemLimit
			c.MemLimit = c.MemUsage + margin
			res.Reclaimed = append(res.Reclaimed, &pb.ReclaimResult_Reclaimed{Handle: c.Handle, OldLimitBytes: old,
				NewLimitBytes: c.MemLimit, UsageBytes: uint64(c.MemUsage), ReclaimedBytes: uint64(old - c.MemLimit)})
		}
	}
	if len(rr.Handles) == 0 {
		for _, c := range d.cont {
			apply(c)
		}
	}
	for _, h := range rr.Handles {
		if c := d.cont[h]; c != nil {
			apply(c)
		}
	}
	d.mu.Unlock()
	go d.send(&pb.Envelope{RequestId: id, Body: &pb.Envelope_ReclaimResult{ReclaimResult: res}})
}

// SetCPUPlacement makes the daemon answer CpuPlacementQuery with f.
func (d *Daemon) SetCPUPlacement(f func(*pb.CpuPlacementQuery) *pb.CpuPlacementAnswer) {
	d.mu.Lock()
	d.cpuPlacement = f
	d.mu.Unlock()
}
