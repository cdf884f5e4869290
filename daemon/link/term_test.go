package link

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// fakeController answers one hello per connection with ack, then sends
// one SetLimits and reports what came back (nil: the daemon hung up).
type fakeController struct {
	ln    net.Listener
	ack   *escrapb.HelloAck
	hello atomic.Int32
	reply chan *escrapb.Envelope
}

func startFake(t *testing.T, udp string, ack *escrapb.HelloAck, setLimits bool) *fakeController {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ack.TelemetryAddr = udp
	f := &fakeController{ln: ln, ack: ack, reply: make(chan *escrapb.Envelope, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r, w := wire.NewEnvelopeReader(c), wire.NewEnvelopeWriter(c)
				var env escrapb.Envelope
				if r.Read(&env) != nil || env.GetHello() == nil {
					return
				}
				f.hello.Add(1)
				if w.Write(&escrapb.Envelope{Body: &escrapb.Envelope_HelloAck{HelloAck: f.ack}}) != nil || !setLimits {
					return
				}
				w.Write(&escrapb.Envelope{RequestId: 7, Body: &escrapb.Envelope_SetLimits{SetLimits: &escrapb.SetLimits{
					Updates: []*escrapb.LimitUpdate{{Handle: 1, Generation: 1, Limits: &escrapb.Limits{CpuQuotaUs: 5000}}}}}})
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				for {
					env := &escrapb.Envelope{}
					if r.Read(env) != nil {
						f.reply <- nil
						return
					}
					if env.GetSetLimitsAck() != nil {
						f.reply <- env
						return
					}
				}
			}()
		}
	}()
	return f
}

type countingHandler struct {
	nopHandler
	mu   sync.Mutex
	sets int
}

func (h *countingHandler) SetLimits(time.Time, *escrapb.SetLimits) *escrapb.SetLimitsAck {
	h.mu.Lock()
	h.sets++
	h.mu.Unlock()
	return &escrapb.SetLimitsAck{Applied: []*escrapb.SetLimitsAck_Applied{{Handle: 1, Generation: 1}}}
}

// Several controllers: a follower's pointer to the leader is followed;
// a controller whose term is below one seen already (a deposed leader)
// gets no session and its SetLimits are never applied.
func TestFollowsLeaderAndRefusesOlderTerm(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ua := udp.LocalAddr().String()
	leader := startFake(t, ua, &escrapb.HelloAck{SessionId: 1, PeriodUs: 100000, Term: 5}, true)
	follower := startFake(t, ua, &escrapb.HelloAck{Leader: leader.ln.Addr().String()}, false)
	deposed := startFake(t, ua, &escrapb.HelloAck{SessionId: 1, PeriodUs: 100000, Term: 3}, true)

	h := &countingHandler{}
	c := New(Config{Addrs: []string{follower.ln.Addr().String(), deposed.ln.Addr().String()},
		Hello: &escrapb.HostHello{HostId: "h"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, h)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	// Follower → leader: the term-5 session applies SetLimits.
	select {
	case env := <-leader.reply:
		if env == nil || env.GetSetLimitsAck().Applied[0].Error != "" {
			t.Fatalf("leader's set-limits: %v", env)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("never reached the leader through the follower")
	}
	if c.Term() != 5 || follower.hello.Load() == 0 {
		t.Fatalf("term %d, follower asked %d times", c.Term(), follower.hello.Load())
	}
	// The leader goes away; the daemon tries the deposed one (term 3).
	leader.ln.Close()
	deadline := time.Now().Add(5 * time.Second)
	for deposed.hello.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if deposed.hello.Load() == 0 {
		t.Fatal("the other controller was never tried")
	}
	select {
	case env := <-deposed.reply:
		if env != nil {
			t.Fatalf("the deposed leader's set-limits was answered: %v", env)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deposed leader's session was not refused")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sets != 1 {
		t.Fatalf("%d set-limits applied, want only the leader's", h.sets)
	}
}
