package session

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// grabHandler hands the session it greets to the test.
type grabHandler struct {
	nopHandler
	got chan *Session
}

func (h *grabHandler) Hello(s *Session, m *pb.HostHello) (*pb.HelloAck, error) {
	h.got <- s
	return h.nopHandler.Hello(s, m)
}

// daemonEnd is the daemon's side of a session over a pipe.
type daemonEnd struct {
	t    *testing.T
	s    *Session
	r    *wire.EnvelopeReader
	w    *wire.EnvelopeWriter
	conn net.Conn
	done chan struct{}
}

func startSession(t *testing.T) *daemonEnd {
	c1, c2 := net.Pipe()
	h := &grabHandler{got: make(chan *Session, 1)}
	d := &daemonEnd{t: t, r: wire.NewEnvelopeReader(c2), w: wire.NewEnvelopeWriter(c2), conn: c2, done: make(chan struct{})}
	go func() {
		Serve(context.Background(), c1, h, Config{RPCTimeout: 5 * time.Second}, 1)
		close(d.done)
	}()
	if err := d.w.Write(&pb.Envelope{RequestId: 1, Body: &pb.Envelope_Hello{Hello: &pb.HostHello{HostId: "h"}}}); err != nil {
		t.Fatal(err)
	}
	d.s = <-h.got
	d.next() // the hello ack
	t.Cleanup(func() { c2.Close(); <-d.done })
	return d
}

// next reads envelopes until one that is not a heartbeat.
func (d *daemonEnd) next() *pb.Envelope {
	d.t.Helper()
	d.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		var env pb.Envelope
		if err := d.r.Read(&env); err != nil {
			d.t.Fatalf("daemon end: %v", err)
		}
		if env.GetHeartbeat() == nil {
			return &env
		}
	}
}

func (d *daemonEnd) send(id uint64, ack *pb.SetLimitsAck) {
	d.t.Helper()
	if err := d.w.Write(&pb.Envelope{RequestId: id, Body: &pb.Envelope_SetLimitsAck{SetLimitsAck: ack}}); err != nil {
		d.t.Fatal(err)
	}
}

func applied(h uint32, gen uint64, deferred bool) *pb.SetLimitsAck {
	return &pb.SetLimitsAck{Applied: []*pb.SetLimitsAck_Applied{{Handle: h, Generation: gen, Deferred: deferred}}}
}

// A cut the daemon wrote while a docker update carrying a larger limit was
// in flight is acknowledged "deferred": the controller must not count it
// as applied (and hand its share on) until the late ack, request id 0.
func TestDeferredAckWaitsForLateAck(t *testing.T) {
	d := startSession(t)
	res := make(chan error, 1)
	d.s.Push(Update{Handle: 4, Gen: 7, QuotaUs: 20000, PeriodUs: 100000, OnApplied: func(err error) { res <- err }})
	env := d.next()
	if env.GetSetLimits() == nil {
		t.Fatalf("want SetLimits, got %v", env)
	}
	d.send(env.RequestId, applied(4, 7, true))
	select {
	case err := <-res:
		t.Fatalf("deferred acknowledgement answered before the late ack: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	d.send(0, applied(4, 6, false)) // older generation: not enough
	select {
	case err := <-res:
		t.Fatalf("late ack for generation 6 answered generation 7: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	d.send(0, applied(4, 7, false))
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("late ack: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("late ack did not answer the held acknowledgement")
	}
}

// The late ack may overtake the deferred one (they are sent from different
// goroutines of escrad): the deferral is then answered at once.
func TestLateAckBeforeDeferral(t *testing.T) {
	d := startSession(t)
	res := make(chan error, 1)
	d.s.Push(Update{Handle: 4, Gen: 3, QuotaUs: 20000, PeriodUs: 100000, OnApplied: func(err error) { res <- err }})
	env := d.next()
	d.send(0, applied(4, 3, false))
	d.send(env.RequestId, applied(4, 3, true))
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held for ever: the late ack came first")
	}
}

// A session that ends fails what it holds with ErrClosed: not known to be
// applied, so the larger limit stays counted.
func TestDeferredAckFailsOnClose(t *testing.T) {
	d := startSession(t)
	res := make(chan error, 1)
	d.s.Push(Update{Handle: 4, Gen: 2, QuotaUs: 20000, PeriodUs: 100000, OnApplied: func(err error) { res <- err }})
	env := d.next()
	d.send(env.RequestId, applied(4, 2, true))
	select {
	case err := <-res:
		t.Fatalf("deferred acknowledgement answered before the session ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	d.conn.Close()
	select {
	case err := <-res:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held acknowledgement not failed when the session ended")
	}
}
