package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
)

// TagBytes is the authentication tag appended to a telemetry datagram in
// authenticated mode: HMAC-SHA256 over the encoded TelemetryBatch,
// truncated to 128 bits. The datagram is batch || tag and stays within
// MaxDatagramBytes (the Batcher reserves the room).
const TagBytes = 16

// DatagramMAC signs and checks datagrams with one session key. Not safe
// for concurrent use (one per sender goroutine / receiver goroutine).
type DatagramMAC struct {
	h   hash.Hash
	sum []byte
}

// NewDatagramMAC keys a MAC (the key comes from auth.TelemetryKey).
func NewDatagramMAC(key []byte) *DatagramMAC {
	return &DatagramMAC{h: hmac.New(sha256.New, key), sum: make([]byte, 0, sha256.Size)}
}

func (m *DatagramMAC) tag(msg []byte) []byte {
	m.h.Reset()
	m.h.Write(msg)
	m.sum = m.h.Sum(m.sum[:0])
	return m.sum[:TagBytes]
}

// Seal appends msg's tag to msg (which must have TagBytes of spare
// capacity to avoid a copy).
func (m *DatagramMAC) Seal(msg []byte) []byte { return append(msg, m.tag(msg)...) }

// Open splits a datagram into batch and tag and checks the tag in constant
// time; ok is false for a short or forged datagram.
func (m *DatagramMAC) Open(datagram []byte) (msg []byte, ok bool) {
	if len(datagram) < TagBytes {
		return nil, false
	}
	msg, tag := datagram[:len(datagram)-TagBytes], datagram[len(datagram)-TagBytes:]
	return msg, hmac.Equal(m.tag(msg), tag)
}

// ReplayWindow accepts each batch_seq once: sequence numbers above the
// highest seen, or within the 64 below it and not seen yet (the sliding
// window of RFC 4303 §3.4.3). Sequence 0 is never valid (the Batcher
// starts at 1).
type ReplayWindow struct {
	top  uint64
	seen uint64 // bit i: top-i was accepted
}

// Accept reports whether seq is new and records it.
func (w *ReplayWindow) Accept(seq uint64) bool {
	switch {
	case seq == 0:
		return false
	case seq > w.top:
		d := seq - w.top
		if d >= 64 {
			w.seen = 1
		} else {
			w.seen = w.seen<<d | 1
		}
		w.top = seq
		return true
	default:
		d := w.top - seq
		if d >= 64 || w.seen&(1<<d) != 0 {
			return false
		}
		w.seen |= 1 << d
		return true
	}
}
