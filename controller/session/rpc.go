package session

import (
	"time"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

type waiter struct {
	handle uint32
	gen    uint64
	cb     ackTo
}

type rpc struct {
	deadline  time.Time
	waiters   []waiter
	onReclaim func(*pb.ReclaimResult, error)
	onReply   func(*pb.Envelope, error)
}

// Reclaim asks the daemon to reclaim (§IV-C) and calls cb with the result.
func (s *Session) Reclaim(handles []uint32, marginBytes uint64, cb func(*pb.ReclaimResult, error)) {
	env := &pb.Envelope{Body: &pb.Envelope_Reclaim{Reclaim: &pb.ReclaimRequest{SafeMarginBytes: marginBytes, Handles: handles}}}
	if err := s.request(env, s.cfg.RPCTimeout, &rpc{onReclaim: cb}); err != nil {
		cb(nil, err)
	}
}

// Call sends one request envelope (the deployer's CreateContainer,
// RemoveContainers) and calls cb with the reply, an Error reply as err, or
// ErrTimeout after timeout. Unlike SetLimits these can take seconds
// (Docker), so the deadline is the caller's.
func (s *Session) Call(env *pb.Envelope, timeout time.Duration, cb func(*pb.Envelope, error)) {
	if err := s.request(env, timeout, &rpc{onReply: cb}); err != nil {
		cb(nil, err)
	}
}

// request queues env under the next request id with r waiting for its
// reply until timeout; ErrClosed (and nothing queued) after shutdown.
func (s *Session) request(env *pb.Envelope, timeout time.Duration, r *rpc) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.nextID++
	env.RequestId = s.nextID
	r.deadline = time.Now().Add(timeout)
	s.rpcs[env.RequestId] = r
	s.envs = append(s.envs, verdict{env: env})
	s.mu.Unlock()
	s.poke()
	return nil
}

func (s *Session) take(id uint64) *rpc {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rpcs[id]
	delete(s.rpcs, id)
	return r
}

func (s *Session) replied(id uint64, env *pb.Envelope) {
	r := s.take(id)
	if r != nil && r.onReply != nil {
		r.onReply(env, nil)
	}
}

func (s *Session) reclaimed(id uint64, res *pb.ReclaimResult, err error) {
	r := s.take(id)
	if r == nil {
		return
	}
	if r.onReclaim != nil {
		r.onReclaim(res, err)
	}
	for _, w := range r.waiters {
		w.cb.call(ErrNotAcked)
	}
}

func (s *Session) failed(id uint64, err error) {
	r := s.take(id)
	if r == nil {
		return
	}
	r.fail(err)
}

func (s *Session) expire(now time.Time) {
	var late []*rpc
	s.mu.Lock()
	for id, r := range s.rpcs {
		if now.After(r.deadline) {
			late = append(late, r)
			delete(s.rpcs, id)
		}
	}
	s.mu.Unlock()
	for _, r := range late {
		r.fail(ErrTimeout)
	}
}

// fail answers every callback of r with err.
func (r *rpc) fail(err error) {
	r.failReply(err)
	for _, w := range r.waiters {
		w.cb.call(err)
	}
}

// failReply answers r's Reclaim or Call callback with err; the waiters
// of its limit updates are not told.
func (r *rpc) failReply(err error) {
	if r.onReclaim != nil {
		r.onReclaim(nil, err)
	}
	if r.onReply != nil {
		r.onReply(nil, err)
	}
}
