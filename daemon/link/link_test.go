package link

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

type nopHandler struct{}

func (nopHandler) SetLimits(time.Time, *escrapb.SetLimits) *escrapb.SetLimitsAck {
	return &escrapb.SetLimitsAck{}
}
func (nopHandler) Reclaim(*escrapb.ReclaimRequest) *escrapb.ReclaimResult {
	return &escrapb.ReclaimResult{}
}
func (nopHandler) Registrations() []*escrapb.ContainerRegister { return nil }
func (nopHandler) MemoryUsage() *escrapb.MemoryUsage           { return nil }

// A controller that echoed a heartbeat and then goes silent with its
// socket open (SIGSTOP, a partition that drops packets) is declared dead
// after DeadAfter: the session ends and a pending OOM request is released
// (nil verdict) then, not at its own deadline.
func TestSilentControllerDeclaredDead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	echoed := make(chan time.Time, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r, w := wire.NewEnvelopeReader(c), wire.NewEnvelopeWriter(c)
		env := &escrapb.Envelope{}
		if r.Read(env) != nil {
			return
		}
		w.Write(&escrapb.Envelope{RequestId: env.RequestId, Body: &escrapb.Envelope_HelloAck{HelloAck: &escrapb.HelloAck{
			SessionId: 1, PeriodUs: 100000, TelemetryAddr: udp.LocalAddr().String()}}})
		silent := false
		for {
			env := &escrapb.Envelope{}
			if r.Read(env) != nil {
				return
			}
			if hb := env.GetHeartbeat(); hb != nil && !silent {
				w.Write(&escrapb.Envelope{Body: &escrapb.Envelope_Heartbeat{Heartbeat: hb}})
				echoed <- time.Now()
				silent = true // from now on: read, never answer
			}
		}
	}()
	c := New(Config{Addr: ln.Addr().String(), Hello: &escrapb.HostHello{HostId: "h"}, Heartbeat: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, nopHandler{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for !c.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("no session")
		}
		time.Sleep(5 * time.Millisecond)
	}
	released := make(chan time.Time, 1)
	if _, err := c.RequestOOM(&escrapb.OomRequest{Handle: 1}, func(v *escrapb.OomVerdict) {
		if v == nil {
			released <- time.Now()
		}
	}); err != nil {
		t.Fatal(err)
	}
	var t0 time.Time
	select {
	case t0 = <-echoed:
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat sent")
	}
	select {
	case t1 := <-released:
		// Dead after 3 s of silence (the deadline moves every 3/8 s).
		d := t1.Sub(t0)
		t.Logf("pending OOM request released %v after the controller's last envelope", d.Round(time.Millisecond))
		if d < 2*time.Second || d > 5*time.Second {
			t.Fatalf("pending OOM request released %v after the controller went silent; want about 3 s", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the silent controller's session was never declared dead")
	}
}

// stuckableController acks the hello, then calls serve with the session's reader.
func stuckableController(t *testing.T, serve func(r *wire.EnvelopeReader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r, w := wire.NewEnvelopeReader(c), wire.NewEnvelopeWriter(c)
		if r.Read(&escrapb.Envelope{}) != nil {
			return
		}
		w.Write(&escrapb.Envelope{Body: &escrapb.Envelope_HelloAck{HelloAck: &escrapb.HelloAck{
			SessionId: 1, PeriodUs: 100000, TelemetryAddr: udp.LocalAddr().String()}}})
		serve(r)
	}()
	return ln.Addr().String()
}

func connect(t *testing.T, addr string) *Client {
	t.Helper()
	c := New(Config{Addr: addr, Hello: &escrapb.HostHello{HostId: "h"}, Heartbeat: time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, nopHandler{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Run(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for !c.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("no session")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c
}

// Envelopes reach the controller in the order of the calls (a lease use
// before the return the agent's lock orders after it).
func TestSendOrder(t *testing.T) {
	got := make(chan uint64, 2000)
	c := connect(t, stuckableController(t, func(r *wire.EnvelopeReader) {
		for {
			env := &escrapb.Envelope{}
			if r.Read(env) != nil {
				return
			}
			if u := env.GetCpuLeaseUse(); u != nil {
				got <- u.LeaseId
			}
			if ret := env.GetCpuLeaseReturn(); ret != nil {
				got <- ret.LeaseId
			}
		}
	}))
	for i := uint64(1); i <= 1000; i++ {
		var err error
		if i%2 == 1 {
			err = c.LeaseUse(&escrapb.CpuLeaseUse{LeaseId: i})
		} else {
			err = c.send(0, &escrapb.Envelope_CpuLeaseReturn{CpuLeaseReturn: &escrapb.CpuLeaseReturn{LeaseId: i}})
		}
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for want := uint64(1); want <= 1000; want++ {
		select {
		case id := <-got:
			if id != want {
				t.Fatalf("envelope %d arrived where %d was sent", id, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("envelope %d never arrived", want)
		}
	}
}

// A controller that stops reading never blocks a sender (the sampler
// raising a quota from lease credit): the queue fills, the send fails at
// once and the session is closed.
func TestSendNeverWaitsOnAStuckController(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	c := connect(t, stuckableController(t, func(*wire.EnvelopeReader) { <-stop }))
	big := string(make([]byte, 4096))
	done := make(chan error, 1)
	go func() {
		// Socket buffers hold a few MB; the queue 8192 frames: 64 MB of
		// frames must overflow both.
		for i := 0; i < 16384; i++ {
			if err := c.LeaseUse(&escrapb.CpuLeaseUse{App: big, LeaseId: uint64(i)}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errQueueFull) {
			t.Fatalf("16384 unread envelopes: %v, want %v", err, errQueueFull)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a sender blocked on a controller that does not read")
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the session stayed up with a full send queue")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
