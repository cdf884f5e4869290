package session

import (
	"time"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

// MemCreditHandler is implemented by a Handler that takes the host-local
// memory credit messages (docs/host-credit.md); others count them as
// unexpected.
type MemCreditHandler interface {
	MemCreditUse(s *Session, u *pb.MemCreditUse)
	MemCreditReturn(s *Session, r *pb.MemCreditReturn)
}

// MemCredit sends a MemCredit grant, revoke or members list. It goes out
// after the limit updates queued with it (one writer round), never before.
func (s *Session) MemCredit(c *pb.MemCredit) {
	s.sendEnv(&pb.Envelope{Body: &pb.Envelope_MemCredit{MemCredit: c}}, time.Time{})
}
