package session

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// A session whose controller may no longer act (its leadership lease past
// its deadline, Config.MayAct) sends nothing more: the next round closes
// the connection with the queued update unsent, and its callback fails.
func TestNothingSentOnceMayActIsFalse(t *testing.T) {
	var may atomic.Bool
	may.Store(true)
	c1, c2 := net.Pipe()
	h := &grabHandler{got: make(chan *Session, 1)}
	done := make(chan struct{})
	go func() {
		Serve(context.Background(), c1, h, Config{RPCTimeout: 5 * time.Second, MayAct: may.Load}, 1)
		close(done)
	}()
	t.Cleanup(func() { c2.Close(); <-done })
	d := &daemonEnd{t: t, r: wire.NewEnvelopeReader(c2), w: wire.NewEnvelopeWriter(c2), conn: c2, done: done}
	if err := d.w.Write(&pb.Envelope{RequestId: 1, Body: &pb.Envelope_Hello{Hello: &pb.HostHello{HostId: "h"}}}); err != nil {
		t.Fatal(err)
	}
	d.s = <-h.got
	d.next() // the hello ack
	d.s.Push(Update{Handle: 1, Gen: 1, QuotaUs: 20000, PeriodUs: 100000})
	if env := d.next(); env.GetSetLimits() == nil {
		t.Fatalf("want SetLimits while it may act, got %v", env)
	}
	may.Store(false)
	res := make(chan error, 1)
	d.s.Push(Update{Handle: 1, Gen: 2, QuotaUs: 30000, PeriodUs: 100000, OnApplied: func(err error) { res <- err }})
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		var env pb.Envelope
		if err := d.r.Read(&env); err != nil {
			break // closed: what we want
		}
		if env.GetSetLimits() != nil {
			t.Fatalf("SetLimits sent after MayAct turned false: %v", &env)
		}
	}
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("the unsent update reported applied")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the unsent update's callback never ran")
	}
}
