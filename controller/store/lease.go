package store

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseMargin is how long before its lease could expire at etcd a leader
// gives up: the time a decision already taken needs to reach a daemon
// (a session write, a SetLimits in the writer's queue) and the clocks'
// drift over one TTL. A successor can win only once etcd expired the
// lease, so no two leaders act at once.
func leaseMargin(life time.Duration) time.Duration { return life / 4 }

// leaseDeadline is when a lease renewed by a keepalive sent at sent (or
// granted by a request sent then) may have expired at etcd, less the
// margin. It is measured from the send, not from the reply: etcd renews
// when it receives the keepalive, which is no earlier than the send, and
// the reply may come back late.
func leaseDeadline(sent time.Time, life time.Duration) time.Time {
	return sent.Add(life - leaseMargin(life))
}

// holdLease renews lease id every life/3 and closes done at the deadline
// of the last renewal that came back, or when ctx ends.
func (s *Etcd) holdLease(ctx context.Context, id clientv3.LeaseID, granted time.Time, life time.Duration, done chan<- struct{}) {
	defer close(done)
	renewed := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(life / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			sent := time.Now()
			kctx, cancel := context.WithTimeout(ctx, life)
			r, err := s.cli.KeepAliveOnce(kctx, id)
			cancel()
			if err != nil || r.TTL <= 0 {
				continue // the deadline of the last renewal stands
			}
			select {
			case <-renewed: // an older deadline the watcher has not taken yet
			default:
			}
			renewed <- leaseDeadline(sent, time.Duration(r.TTL)*time.Second)
		}
	}()
	deadline := leaseDeadline(granted, life)
	s.until.Store(&deadline)
	defer s.until.Store(nil)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		select {
		case d := <-renewed:
			if d.After(deadline) {
				deadline = d
				s.until.Store(&d)
				t.Reset(time.Until(deadline))
			}
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Holding reports whether the lease is within its deadline now. It reads
// the clock, so it is right at once after the process was stopped past the
// deadline (SIGSTOP, a paused VM), when holdLease's timer has not fired yet.
func (s *Etcd) Holding() bool {
	d := s.until.Load()
	return d != nil && time.Now().Before(*d)
}
