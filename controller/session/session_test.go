package session

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

type nopHandler struct {
	mu  sync.Mutex
	bad int
}

func (h *nopHandler) Hello(s *Session, _ *pb.HostHello) (*pb.HelloAck, error) {
	return &pb.HelloAck{SessionId: s.ID, PeriodUs: 100000}, nil
}
func (h *nopHandler) Register(*Session, *pb.ContainerRegister) error           { return nil }
func (h *nopHandler) Unregister(*Session, *pb.ContainerUnregister)             {}
func (h *nopHandler) MemoryUsage(*Session, *pb.MemoryUsage)                    {}
func (h *nopHandler) OOM(s *Session, id uint64, o *pb.OomRequest, _ time.Time) {}
func (h *nopHandler) BadInput(*Session, string, error)                         { h.mu.Lock(); h.bad++; h.mu.Unlock() }
func (h *nopHandler) Closed(*Session)                                          {}

func hello() []byte {
	b, _ := wire.AppendEnvelope(nil, &pb.Envelope{RequestId: 1, Body: &pb.Envelope_Hello{Hello: &pb.HostHello{HostId: "h"}}})
	return b
}

// serveBytes runs a session over a pipe fed with data and returns when it ends.
func serveBytes(t *testing.T, data []byte) *nopHandler {
	c1, c2 := net.Pipe()
	h := &nopHandler{}
	done := make(chan struct{})
	go func() {
		Serve(context.Background(), c1, h, Config{RPCTimeout: 50 * time.Millisecond}, 1)
		close(done)
	}()
	go func() { // drain the controller's replies
		buf := make([]byte, 4096)
		for {
			if _, err := c2.Read(buf); err != nil {
				return
			}
		}
	}()
	c2.SetWriteDeadline(time.Now().Add(time.Second))
	c2.Write(data)
	c2.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("session did not end")
	}
	return h
}

func TestHandshakeRequired(t *testing.T) {
	b, _ := wire.AppendEnvelope(nil, &pb.Envelope{Body: &pb.Envelope_Heartbeat{Heartbeat: &pb.Heartbeat{}}})
	if h := serveBytes(t, b); h.bad != 1 {
		t.Fatalf("bad input not counted: %d", h.bad)
	}
}

// FuzzSession feeds arbitrary bytes after a valid hello: the session ends
// or carries on, never panics.
func FuzzSession(f *testing.F) {
	reg, _ := wire.AppendEnvelope(nil, &pb.Envelope{RequestId: 2, Body: &pb.Envelope_Register{Register: &pb.ContainerRegister{Handle: 1, App: "a"}}})
	ack, _ := wire.AppendEnvelope(nil, &pb.Envelope{RequestId: 9, Body: &pb.Envelope_SetLimitsAck{SetLimitsAck: &pb.SetLimitsAck{
		Applied: []*pb.SetLimitsAck_Applied{{Handle: 1, Generation: 3}}}}})
	f.Add(reg)
	f.Add(ack)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		serveBytes(t, append(hello(), data...))
	})
}
