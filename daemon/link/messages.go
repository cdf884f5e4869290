package link

import (
	"github.com/escra-dev/escra/proto/escrapb"
)

// LeaseUse reports a quota raise from lease credit. It is queued at once,
// without waiting on the socket, so it precedes on the wire any return the
// caller's lock orders after it (docs/protocol.md).
func (c *Client) LeaseUse(u *escrapb.CpuLeaseUse) error {
	return c.send(0, &escrapb.Envelope_CpuLeaseUse{CpuLeaseUse: u})
}

// LateAck confirms acknowledgements SetLimits deferred (request id 0,
// see SetLimitsAck.Applied.deferred). Dropped when down: the session that
// was owed them ended, and its controller counts those limits as held.
func (c *Client) LateAck(a *escrapb.SetLimitsAck) error {
	return c.send(0, &escrapb.Envelope_SetLimitsAck{SetLimitsAck: a})
}

// Register announces a container (dropped when down: sent again on connect).
func (c *Client) Register(r *escrapb.ContainerRegister) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || c.sent[r.Handle] {
		return nil
	}
	err := c.sendLocked(0, &escrapb.Envelope_Register{Register: r})
	if err == nil {
		c.sent[r.Handle] = true
	}
	return err
}

// SendImageState sends the engine's image store; while down it is
// dropped (the reporter's state goes with the next connect).
func (c *Client) SendImageState(st *escrapb.ImageState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	return c.sendLocked(0, &escrapb.Envelope_ImageState{ImageState: st})
}

// Unregister announces a container's end.
func (c *Client) Unregister(u *escrapb.ContainerUnregister) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || !c.sent[u.Handle] {
		return nil
	}
	delete(c.sent, u.Handle)
	return c.sendLocked(0, &escrapb.Envelope_Unregister{Unregister: u})
}

// RequestOOM sends an OOM request; cb gets the verdict, or nil when the
// session drops first. It returns the request id (for Cancel) or an error
// at once when no session is up.
func (c *Client) RequestOOM(req *escrapb.OomRequest, cb func(*escrapb.OomVerdict)) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return 0, errDown
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cb
	if err := c.sendLocked(id, &escrapb.Envelope_OomRequest{OomRequest: req}); err != nil {
		delete(c.pending, id)
		return 0, err
	}
	return id, nil
}

// Cancel forgets a pending OOM request (its deadline passed).
func (c *Client) Cancel(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}
