package link

import "github.com/escra-dev/escra/proto/escrapb"

// MemCreditHandler is implemented by a Handler that holds host-local
// memory credit (docs/daemon.md). MemCredit runs on the reader goroutine
// and returns the answer to a revoke (nil: none); MemCreditLost is called
// when the session ends, before another can start: the controller drops
// (or holds) its side.
type MemCreditHandler interface {
	MemCredit(m *escrapb.MemCredit) *escrapb.MemCreditReturn
	MemCreditLost()
}

// MemCreditUse reports a memory limit raised from credit on an OOM. It is
// queued for the session's writer at once, never written from the
// caller's goroutine, so it precedes on the wire any return the caller's
// lock orders after it.
func (c *Client) MemCreditUse(u *escrapb.MemCreditUse) error {
	return c.send(0, &escrapb.Envelope_MemCreditUse{MemCreditUse: u})
}
