package link

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/wallclock"
	"github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// session runs one TCP session with the controller at addr until it
// ends: hello, registrations, then the reader loop serving its requests.
func (c *Client) session(ctx context.Context, addr string) (up bool, leader string, err error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	var conn net.Conn
	if c.cfg.TLS != nil {
		td := tls.Dialer{NetDialer: &d, Config: c.cfg.TLS}
		conn, err = td.DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return false, "", err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()

	w := wire.NewEnvelopeWriter(conn)
	r := wire.NewEnvelopeReader(conn)
	var env escrapb.Envelope
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := w.Write(&escrapb.Envelope{Body: &escrapb.Envelope_Hello{Hello: c.cfg.Hello}}); err != nil {
		return false, "", err
	}
	if err := r.Read(&env); err != nil {
		return false, "", fmt.Errorf("waiting for hello ack: %w", err)
	}
	ack := env.GetHelloAck()
	if ack != nil && ack.SessionId == 0 {
		if ack.Leader == "" {
			return false, "", errors.New("controller is not the leader, and none is elected yet")
		}
		return false, ack.Leader, fmt.Errorf("controller is not the leader (the leader is at %s)", ack.Leader)
	}
	if ack == nil {
		if e := env.GetError(); e != nil {
			return false, "", fmt.Errorf("controller refused hello: %s", e.Message)
		}
		return false, "", errors.New("controller answered hello without a session")
	}
	// Terms only grow: a lower one is a deposed leader that has not
	// noticed yet; its limits are not applied.
	term := ack.Term
	if seen := c.maxTerm.Load(); term < seen {
		return false, "", fmt.Errorf("controller is at term %d, below the term %d already seen: a deposed leader", term, seen)
	}
	c.maxTerm.Store(term)
	conn.SetDeadline(time.Time{})
	us, err := dialTelemetry(ack.TelemetryAddr, conn.RemoteAddr())
	if err != nil {
		return false, "", err
	}
	defer us.conn.Close()
	us.id = ack.SessionId
	if tc, ok := conn.(*tls.Conn); ok {
		key, err := auth.TelemetryKey(tc.ConnectionState(), us.id)
		if err != nil {
			return false, "", err
		}
		us.mac = wire.NewDatagramMAC(key)
	}
	c.udp.Store(us)
	defer c.udp.CompareAndSwap(us, nil)

	// Every envelope after the handshake goes through one queue and one
	// writer goroutine: a caller (the sampler raising a quota from lease
	// credit, the reader answering set-limits) never waits on the socket,
	// and the wire order is the order of the calls.
	q := make(chan []byte, sendQueueLen)
	wdone := make(chan struct{})
	defer close(wdone)
	go c.writer(conn, q, wdone)

	// Registering everything happens under c.mu, so a container the agent
	// adds meanwhile is registered exactly once on this session.
	c.mu.Lock()
	c.conn, c.q, c.sent = conn, q, map[uint32]bool{}
	for _, reg := range c.h.Registrations() {
		if err := c.sendLocked(0, &escrapb.Envelope_Register{Register: reg}); err != nil {
			c.mu.Unlock()
			c.drop()
			return true, "", err
		}
		c.sent[reg.Handle] = true
	}
	if ir, ok := c.h.(ImageReporter); ok {
		if st := ir.ImageState(); st != nil {
			if err := c.sendLocked(0, &escrapb.Envelope_ImageState{ImageState: st}); err != nil {
				c.mu.Unlock()
				c.drop()
				return true, "", err
			}
		}
	}
	c.mu.Unlock()
	defer c.drop()
	c.Connects.Add(1)
	c.addr.Store(&addr)
	defer c.addr.Store(nil)
	c.cfg.Log.Info("controller session up", "addr", addr, "session", ack.SessionId, "term", term, "telemetry", us.conn.RemoteAddr().String())

	hbDone := make(chan struct{})
	defer close(hbDone)
	go c.heartbeats(hbDone)

	// A controller that echoes heartbeats is held to them; one that never
	// did (an older controller) is not.
	echoes := false
	var armed time.Time
	for {
		if now := time.Now(); echoes && now.Sub(armed) > c.cfg.DeadAfter/8 {
			conn.SetReadDeadline(now.Add(c.cfg.DeadAfter))
			armed = now
		}
		if err := r.Read(&env); err != nil {
			if errors.Is(err, io.EOF) {
				return true, "", errors.New("controller closed the session")
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return true, "", fmt.Errorf("controller silent for %v: session declared dead", c.cfg.DeadAfter)
			}
			return true, "", err
		}
		recv := time.Now()
		stale, t, seen := c.staleEnvelope(&env, term) // fence.go
		if stale {
			if err := c.refuseStale(&env, t, seen); err != nil {
				return true, "", err
			}
			continue
		}
		switch b := env.Body.(type) {
		case *escrapb.Envelope_SetLimits:
			ack := c.h.SetLimits(recv, b.SetLimits)
			err = c.send(env.RequestId, &escrapb.Envelope_SetLimitsAck{SetLimitsAck: ack})
		case *escrapb.Envelope_Reclaim:
			res := c.h.Reclaim(b.Reclaim)
			err = c.send(env.RequestId, &escrapb.Envelope_ReclaimResult{ReclaimResult: res})
		case *escrapb.Envelope_CreateContainer:
			c.deploy(ctx, env.RequestId, b.CreateContainer, nil)
		case *escrapb.Envelope_RemoveContainers:
			c.deploy(ctx, env.RequestId, nil, b.RemoveContainers)
		case *escrapb.Envelope_OomVerdict:
			c.mu.Lock()
			cb := c.pending[env.RequestId]
			delete(c.pending, env.RequestId)
			c.mu.Unlock()
			if cb != nil {
				cb(b.OomVerdict)
			}
		case *escrapb.Envelope_CpuLease:
			if lh, ok := c.h.(LeaseHandler); ok {
				if ret := lh.Lease(b.CpuLease); ret != nil {
					err = c.send(0, &escrapb.Envelope_CpuLeaseReturn{CpuLeaseReturn: ret})
				}
			}
		case *escrapb.Envelope_MemCredit:
			if ch, ok := c.h.(MemCreditHandler); ok {
				if ret := ch.MemCredit(b.MemCredit); ret != nil {
					err = c.send(0, &escrapb.Envelope_MemCreditReturn{MemCreditReturn: ret})
				}
			}
		case *escrapb.Envelope_CpuPlacementQuery:
			ans := &escrapb.CpuPlacementAnswer{Refused: "this daemon does not place CPUs"}
			if cp, ok := c.h.(CPUPlacer); ok {
				ans = cp.SimulateCPU(b.CpuPlacementQuery)
			}
			err = c.send(env.RequestId, &escrapb.Envelope_CpuPlacementAnswer{CpuPlacementAnswer: ans})
		case *escrapb.Envelope_Error:
			c.cfg.Log.Warn("controller error", "request", env.RequestId, "msg", b.Error.Message)
		case *escrapb.Envelope_Heartbeat:
			echoes = true
		default:
			c.cfg.Log.Debug("unexpected envelope from controller", "type", fmt.Sprintf("%T", b))
		}
		c.carried(&env, t)
		if err != nil {
			return true, "", err
		}
	}
}

// deploy serves one create or remove request in its own goroutine (Docker
// calls take seconds; set-limits must not wait behind them).
func (c *Client) deploy(ctx context.Context, id uint64, cr *escrapb.CreateContainer, rm *escrapb.RemoveContainers) {
	d, ok := c.h.(Deployer)
	if !ok {
		_ = c.send(id, &escrapb.Envelope_Error{Error: &escrapb.Error{Message: "this daemon cannot create containers (no Docker engine)"}})
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var body any
		if cr != nil {
			res, err := d.CreateContainer(ctx, cr)
			body = &escrapb.Envelope_CreateContainerResult{CreateContainerResult: res}
			if err != nil {
				body = &escrapb.Envelope_Error{Error: &escrapb.Error{Message: err.Error()}}
			}
		} else {
			res, err := d.RemoveContainers(ctx, rm)
			body = &escrapb.Envelope_RemoveContainersResult{RemoveContainersResult: res}
			if err != nil {
				body = &escrapb.Envelope_Error{Error: &escrapb.Error{Message: err.Error()}}
			}
		}
		if err := c.send(id, body); err != nil {
			c.cfg.Log.Warn("deploy reply not sent", "request", id, "err", err)
		}
	}()
}

// drop ends the session state; pending OOM requests get a nil verdict.
func (c *Client) drop() {
	c.mu.Lock()
	c.conn, c.q, c.sent = nil, nil, nil
	p := c.pending
	c.pending = map[uint64]func(*escrapb.OomVerdict){}
	c.mu.Unlock()
	if lh, ok := c.h.(LeaseHandler); ok {
		lh.LeasesLost()
	}
	if ch, ok := c.h.(MemCreditHandler); ok {
		ch.MemCreditLost()
	}
	if so, ok := c.h.(SessionObserver); ok {
		so.SessionEnded()
	}
	for _, cb := range p {
		cb(nil)
	}
}

func (c *Client) heartbeats(done chan struct{}) {
	// On the wall-clock grid: the beat and its usage snapshot share the
	// wake-up of a period's sample (wallclock).
	t := wallclock.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	var seq uint64
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		t.Next()
		seq++
		_ = c.send(0, &escrapb.Envelope_Heartbeat{Heartbeat: &escrapb.Heartbeat{Seq: seq, SentUnixNs: time.Now().UnixNano()}})
		if mu := c.h.MemoryUsage(); mu != nil && len(mu.Samples) > 0 {
			_ = c.send(0, &escrapb.Envelope_MemoryUsage{MemoryUsage: mu})
		}
	}
}
