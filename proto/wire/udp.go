// Package wire frames the escra.v1 messages on their two transports:
// telemetry batches in UDP datagrams and envelopes on the TCP stream.
package wire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

// MaxDatagramBytes bounds one telemetry datagram: below a 1,500-byte MTU
// minus IP/UDP headers, so a batch never fragments.
const MaxDatagramBytes = 1400

// ErrDatagramTooLarge reports a datagram over MaxDatagramBytes.
var ErrDatagramTooLarge = errors.New("wire: datagram over 1400 bytes")

// Field number of TelemetryBatch.stats (tag + length prefix per stat).
const batchStatsField = 4

// Batcher packs CpuStats into TelemetryBatches that each encode to at most
// MaxDatagramBytes. It reuses its buffers: the daemon calls it ten times a
// second per container.
type Batcher struct {
	SessionID uint32
	PeriodUs  uint32
	// MAC, when set, appends an authentication tag to every datagram
	// (authenticated mode); the batch is sized to leave room for it.
	MAC *DatagramMAC

	seq   uint64
	batch pb.TelemetryBatch
	size  int // encoded size of batch so far
	buf   []byte
	opts  proto.MarshalOptions
}

// headerSize is the encoded size of the batch without stats.
func (b *Batcher) headerSize() int {
	b.batch.Stats = b.batch.Stats[:0]
	b.batch.SessionId, b.batch.BatchSeq, b.batch.PeriodUs = b.SessionID, b.seq+1, b.PeriodUs
	return proto.Size(&b.batch)
}

// statSize is what one stat adds to a batch's encoding.
func statSize(s *pb.CpuStat) int {
	n := proto.Size(s)
	return protowire.SizeTag(batchStatsField) + protowire.SizeBytes(n)
}

// Add appends s to the pending batch. When s does not fit, the pending batch
// is encoded and handed to emit first. A stat that alone exceeds the limit
// is an error (it cannot happen with valid field values).
func (b *Batcher) Add(s *pb.CpuStat, emit func([]byte) error) error {
	if b.size == 0 {
		b.size = b.headerSize()
	}
	n := statSize(s)
	if b.size+n > b.limit() {
		if len(b.batch.Stats) == 0 {
			return fmt.Errorf("wire: one stat of %d bytes exceeds a datagram", n)
		}
		if err := b.Flush(emit); err != nil {
			return err
		}
		b.size = b.headerSize()
	}
	b.batch.Stats = append(b.batch.Stats, s)
	b.size += n
	return nil
}

// Flush encodes the pending batch, if any, and passes it to emit. The slice
// is valid only during the call.
func (b *Batcher) Flush(emit func([]byte) error) error {
	if len(b.batch.Stats) == 0 {
		return nil
	}
	b.seq++
	b.batch.BatchSeq = b.seq
	var err error
	b.buf, err = b.opts.MarshalAppend(b.buf[:0], &b.batch)
	if err != nil {
		return err
	}
	b.batch.Stats = b.batch.Stats[:0]
	b.size = 0
	if len(b.buf) > b.limit() {
		return ErrDatagramTooLarge // size accounting bug; never send it
	}
	if b.MAC != nil {
		b.buf = b.MAC.Seal(b.buf)
	}
	return emit(b.buf)
}

// limit is the room for the encoded batch.
func (b *Batcher) limit() int {
	if b.MAC != nil {
		return MaxDatagramBytes - TagBytes
	}
	return MaxDatagramBytes
}

// Pending is the number of stats waiting for Flush.
func (b *Batcher) Pending() int { return len(b.batch.Stats) }

// DecodeBatch parses one datagram into dst (reset first).
func DecodeBatch(data []byte, dst *pb.TelemetryBatch) error {
	if len(data) > MaxDatagramBytes {
		return ErrDatagramTooLarge
	}
	if err := proto.Unmarshal(data, dst); err != nil {
		return fmt.Errorf("wire: bad telemetry batch: %w", err)
	}
	if dst.SessionId == 0 {
		return errors.New("wire: telemetry batch without session id")
	}
	return nil
}
