package ingest

import "github.com/escra-dev/escra/proto/wire"

// SessionAuth is one session's datagram authentication: the MAC of its
// telemetry key and its replay window. An Authenticator finds it by
// session id; both methods are called under the listener's lock.
type SessionAuth struct {
	mac    *wire.DatagramMAC
	replay wire.ReplayWindow
}

// NewSessionAuth authenticates datagrams tagged with key.
func NewSessionAuth(key []byte) *SessionAuth {
	return &SessionAuth{mac: wire.NewDatagramMAC(key)}
}

// Verify checks the datagram's trailing tag.
func (a *SessionAuth) Verify(datagram []byte) bool {
	_, ok := a.mac.Open(datagram)
	return ok
}

// Accept records batchSeq; false when it was seen before (a replay).
func (a *SessionAuth) Accept(batchSeq uint64) bool { return a.replay.Accept(batchSeq) }
