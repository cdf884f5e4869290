package peer

import pb "github.com/escra-dev/escra/proto/escrapb"

// MemCredit sends a MemCredit (host-local memory credit).
func (p *Peer) MemCredit(c *pb.MemCredit) error {
	p.mu.Lock()
	s := p.sess
	p.mu.Unlock()
	if s == nil {
		return errNoSession
	}
	return s.write(&pb.Envelope{Body: &pb.Envelope_MemCredit{MemCredit: c}})
}

// MemCreditMessages returns the MemCreditUse and MemCreditReturn messages
// received so far.
func (p *Peer) MemCreditMessages() ([]*pb.MemCreditUse, []*pb.MemCreditReturn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*pb.MemCreditUse(nil), p.memUses...), append([]*pb.MemCreditReturn(nil), p.memReturns...)
}
