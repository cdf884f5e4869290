package link

import (
	"context"
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
