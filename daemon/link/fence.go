package link

import (
	"fmt"
	"time"

	"github.com/escra-dev/escra/proto/escrapb"
)

// Fencing: a controller stamps every envelope with its leadership term
// (Envelope.term). Terms only grow, so one below the highest this daemon
// has seen comes from a deposed leader that has not noticed yet (its
// lease ran out at etcd, a successor won); nothing it sends is carried out.

// staleEnvelope raises the highest term seen when env carries a newer one
// and reports whether env's term (the session's when unstamped: an older
// controller) is below it.
func (c *Client) staleEnvelope(env *escrapb.Envelope, sessionTerm uint64) (stale bool, term, seen uint64) {
	term = env.GetTerm()
	if term == 0 {
		term = sessionTerm
	}
	for {
		seen = c.maxTerm.Load()
		if term <= seen || c.maxTerm.CompareAndSwap(seen, term) {
			break
		}
	}
	return term < seen, term, seen
}

// refuseStale answers a deposed leader's request with a refusal (a
// SetLimits with an error per update, an RPC with an Error), counts it and
// logs it at most once a second. An OOM verdict from it is dropped as if
// the session had ended: the OOM path falls back to what it does with no
// controller.
func (c *Client) refuseStale(env *escrapb.Envelope, term, seen uint64) error {
	c.StaleRefused.Add(1)
	if now := time.Now().UnixNano(); now-c.staleLogged.Load() > int64(time.Second) {
		c.staleLogged.Store(now)
		c.cfg.Log.Warn("message from a deposed controller refused (its term is below one seen since)",
			"type", fmt.Sprintf("%T", env.Body), "term", term, "seen", seen, "refused_total", c.StaleRefused.Load())
	}
	msg := fmt.Sprintf("stale term %d: term %d seen", term, seen)
	switch b := env.Body.(type) {
	case *escrapb.Envelope_SetLimits:
		return c.send(env.RequestId, &escrapb.Envelope_SetLimitsAck{SetLimitsAck: staleTerm(b.SetLimits, term, seen)})
	case *escrapb.Envelope_Reclaim, *escrapb.Envelope_CreateContainer, *escrapb.Envelope_RemoveContainers,
		*escrapb.Envelope_CpuPlacementQuery:
		return c.send(env.RequestId, &escrapb.Envelope_Error{Error: &escrapb.Error{Message: msg}})
	case *escrapb.Envelope_OomVerdict:
		c.mu.Lock()
		cb := c.pending[env.RequestId]
		delete(c.pending, env.RequestId)
		c.mu.Unlock()
		if cb != nil {
			cb(nil)
		}
	}
	return nil
}

// staleTerm refuses every update of m: its session's term is below one
// seen since.
func staleTerm(m *escrapb.SetLimits, term, seen uint64) *escrapb.SetLimitsAck {
	ack := &escrapb.SetLimitsAck{Applied: make([]*escrapb.SetLimitsAck_Applied, len(m.Updates))}
	msg := fmt.Sprintf("stale term %d: term %d seen", term, seen)
	for i, u := range m.Updates {
		ack.Applied[i] = &escrapb.SetLimitsAck_Applied{Handle: u.Handle, Generation: u.Generation, Error: msg}
	}
	return ack
}

// carried counts an action carried out (limits, a reclaim, a deploy, an
// OOM verdict, a lease, a memory credit) and, as a tripwire, one whose
// term is below the highest seen once it was carried out: a newer term
// arrived while it ran, which the check before it cannot rule out.
func (c *Client) carried(env *escrapb.Envelope, term uint64) {
	switch env.Body.(type) {
	case *escrapb.Envelope_SetLimits, *escrapb.Envelope_Reclaim, *escrapb.Envelope_CreateContainer,
		*escrapb.Envelope_RemoveContainers, *escrapb.Envelope_OomVerdict, *escrapb.Envelope_CpuLease, *escrapb.Envelope_MemCredit:
	default:
		return
	}
	c.Actions.Add(1)
	if term < c.maxTerm.Load() {
		c.StaleApplied.Add(1)
	}
}
