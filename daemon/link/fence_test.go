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

type fencedHandler struct {
	countingHandler
	reclaims atomic.Int32
}

func (h *fencedHandler) Reclaim(*escrapb.ReclaimRequest) *escrapb.ReclaimResult {
	h.reclaims.Add(1)
	return &escrapb.ReclaimResult{}
}

// On one session opened at term 5, envelopes stamped with an older term
// are refused (a SetLimits with an error per update, a reclaim with an
// Error) and counted; one stamped 6 raises the term seen, after which the
// session's own term 5, stamped or not, is refused too.
func TestStaleTermRefusedMidSession(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type step struct {
		term    uint64
		reclaim bool
		applied bool // want it carried out
	}
	steps := []step{{4, false, false}, {4, true, false}, {5, false, true}, {6, false, true}, {5, false, false}, {0, false, false}, {5, true, false}, {6, true, true}}
	results := make(chan error, 1)
	got := make([]bool, 0, len(steps))
	go func() {
		c, err := ln.Accept()
		if err != nil {
			results <- err
			return
		}
		defer c.Close()
		r, w := wire.NewEnvelopeReader(c), wire.NewEnvelopeWriter(c)
		var env escrapb.Envelope
		if err := r.Read(&env); err != nil {
			results <- err
			return
		}
		w.Write(&escrapb.Envelope{Term: 5, Body: &escrapb.Envelope_HelloAck{HelloAck: &escrapb.HelloAck{SessionId: 1, PeriodUs: 100000, Term: 5, TelemetryAddr: udp.LocalAddr().String()}}})
		for i, s := range steps {
			id := uint64(100 + i)
			out := &escrapb.Envelope{RequestId: id, Term: s.term, Body: &escrapb.Envelope_SetLimits{SetLimits: &escrapb.SetLimits{
				Updates: []*escrapb.LimitUpdate{{Handle: 1, Generation: uint64(i + 1), Limits: &escrapb.Limits{CpuQuotaUs: 5000}}}}}}
			if s.reclaim {
				out.Body = &escrapb.Envelope_Reclaim{Reclaim: &escrapb.ReclaimRequest{}}
			}
			w.Write(out)
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			for {
				in := &escrapb.Envelope{}
				if err := r.Read(in); err != nil {
					results <- err
					return
				}
				if in.RequestId != id {
					continue // heartbeats
				}
				ok := in.GetReclaimResult() != nil || (in.GetSetLimitsAck() != nil && in.GetSetLimitsAck().Applied[0].Error == "")
				got = append(got, ok)
				break
			}
		}
		results <- nil
	}()
	h := &fencedHandler{}
	cl := New(Config{Addrs: []string{ln.Addr().String()}, Hello: &escrapb.HostHello{HostId: "h"},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, h)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); cl.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	select {
	case err := <-results:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exchange never finished")
	}
	refused := 0
	for i, s := range steps {
		if got[i] != s.applied {
			t.Errorf("step %d (term %d, reclaim %v): carried out %v, want %v", i, s.term, s.reclaim, got[i], s.applied)
		}
		if !s.applied {
			refused++
		}
	}
	h.mu.Lock()
	sets := h.sets
	h.mu.Unlock()
	if sets != 2 || h.reclaims.Load() != 1 {
		t.Errorf("handler saw %d set-limits and %d reclaims; want 2 and 1", sets, h.reclaims.Load())
	}
	if n := cl.StaleRefused.Load(); n != uint64(refused) || cl.Term() != 6 {
		t.Errorf("refused %d (want %d), term %d (want 6)", n, refused, cl.Term())
	}
	if n, st := cl.Actions.Load(), cl.StaleApplied.Load(); n != 3 || st != 0 {
		t.Errorf("actions carried out %d (want 3: the handler's), stale ones %d (want 0)", n, st)
	}
}
