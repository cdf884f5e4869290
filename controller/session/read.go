package session

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// readLoop hands each message of the daemon to h, or to the RPC it
// answers, until the connection ends or the daemon is silent for
// DeadAfter.
func (s *Session) readLoop(r *wire.EnvelopeReader, h Handler) error {
	var armed time.Time // when the read deadline was last pushed out
	p := newPacer(s.cfg.MsgRate, s.cfg.MsgBurst)
	for {
		p.pace(s, h)
		env := &pb.Envelope{}
		// The deadline moves at most every DeadAfter/8 (a timer reset per
		// envelope would cost more than it buys); the margin is that much.
		if now := time.Now(); now.Sub(armed) > s.cfg.DeadAfter/8 {
			s.conn.SetReadDeadline(now.Add(s.cfg.DeadAfter))
			armed = now
		}
		if err := r.Read(env); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("%w (nothing for %v)", ErrSilent, s.cfg.DeadAfter)
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				h.BadInput(s, "envelope", err)
			}
			return err
		}
		now := time.Now()
		s.mu.Lock()
		s.lastSeen = now
		s.mu.Unlock()
		switch b := env.Body.(type) {
		case *pb.Envelope_Register:
			if err := h.Register(s, b.Register); err != nil {
				h.BadInput(s, "register", err)
				s.sendEnv(&pb.Envelope{RequestId: env.RequestId, Body: &pb.Envelope_Error{Error: &pb.Error{Message: err.Error()}}}, time.Time{})
			}
		case *pb.Envelope_Unregister:
			h.Unregister(s, b.Unregister)
		case *pb.Envelope_MemoryUsage:
			h.MemoryUsage(s, b.MemoryUsage)
		case *pb.Envelope_OomRequest:
			h.OOM(s, env.RequestId, b.OomRequest, now)
		case *pb.Envelope_Heartbeat:
			// Echoed, so the daemon can tell a silent controller too.
			s.sendEnv(&pb.Envelope{Body: &pb.Envelope_Heartbeat{Heartbeat: &pb.Heartbeat{Seq: b.Heartbeat.GetSeq(), SentUnixNs: now.UnixNano()}}}, time.Time{})
		case *pb.Envelope_SetLimitsAck:
			if env.RequestId == 0 {
				s.lateAcked(b.SetLimitsAck)
			} else {
				s.acked(env.RequestId, b.SetLimitsAck)
			}
		case *pb.Envelope_ReclaimResult:
			s.reclaimed(env.RequestId, b.ReclaimResult, nil)
		case *pb.Envelope_CreateContainerResult, *pb.Envelope_RemoveContainersResult, *pb.Envelope_CpuPlacementAnswer:
			s.replied(env.RequestId, env)
		case *pb.Envelope_Error:
			s.failed(env.RequestId, fmt.Errorf("daemon: %s", b.Error.GetMessage()))
		case *pb.Envelope_CpuLeaseUse:
			if lh, ok := h.(LeaseHandler); ok {
				lh.LeaseUse(s, b.CpuLeaseUse)
			} else {
				unexpected(s, h, env)
			}
		case *pb.Envelope_CpuLeaseReturn:
			if lh, ok := h.(LeaseHandler); ok {
				lh.LeaseReturn(s, b.CpuLeaseReturn)
			} else {
				unexpected(s, h, env)
			}
		case *pb.Envelope_MemCreditUse:
			if ch, ok := h.(MemCreditHandler); ok {
				ch.MemCreditUse(s, b.MemCreditUse)
			} else {
				unexpected(s, h, env)
			}
		case *pb.Envelope_MemCreditReturn:
			if ch, ok := h.(MemCreditHandler); ok {
				ch.MemCreditReturn(s, b.MemCreditReturn)
			} else {
				unexpected(s, h, env)
			}
		case *pb.Envelope_ImageState:
			if ih, ok := h.(ImageHandler); ok {
				ih.ImageState(s, b.ImageState)
			} else {
				unexpected(s, h, env)
			}
		default:
			unexpected(s, h, env)
		}
	}
}

// unexpected counts a message the controller does not take from a daemon.
func unexpected(s *Session, h Handler, env *pb.Envelope) {
	h.BadInput(s, "unexpected", fmt.Errorf("unexpected %T from daemon", env.Body))
}
