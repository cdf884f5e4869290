package wire

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

// MaxEnvelopeBytes bounds one TCP envelope. The largest legitimate ones
// (a registration burst or a reclaim result for a full host) are far below.
const MaxEnvelopeBytes = 1 << 20

// EnvelopeReader reads length-delimited envelopes from a stream.
type EnvelopeReader struct {
	r    *bufio.Reader
	opts protodelim.UnmarshalOptions
}

// NewEnvelopeReader wraps r; it buffers, so it must own r's reads.
func NewEnvelopeReader(r io.Reader) *EnvelopeReader {
	return &EnvelopeReader{
		r:    bufio.NewReaderSize(r, 64<<10),
		opts: protodelim.UnmarshalOptions{MaxSize: MaxEnvelopeBytes},
	}
}

// Read decodes the next envelope into env (reset first). It returns io.EOF
// at a clean end of stream; any other error means the stream is unusable.
func (er *EnvelopeReader) Read(env *pb.Envelope) error {
	err := er.opts.UnmarshalFrom(er.r, env)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		return io.EOF
	default:
		var tooBig *protodelim.SizeTooLargeError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("wire: envelope of %d bytes over limit %d", tooBig.Size, MaxEnvelopeBytes)
		}
		return fmt.Errorf("wire: bad envelope: %w", err)
	}
	if env.Body == nil {
		return errors.New("wire: envelope without body")
	}
	return nil
}

// EnvelopeWriter writes length-delimited envelopes through one buffer;
// callers serialize access (one writer goroutine per connection).
type EnvelopeWriter struct {
	w   io.Writer
	buf []byte
}

// NewEnvelopeWriter wraps w.
func NewEnvelopeWriter(w io.Writer) *EnvelopeWriter { return &EnvelopeWriter{w: w} }

// Write frames and writes env in one Write call.
func (ew *EnvelopeWriter) Write(env *pb.Envelope) error {
	var err error
	ew.buf, err = AppendEnvelope(ew.buf[:0], env)
	if err != nil {
		return err
	}
	_, err = ew.w.Write(ew.buf)
	return err
}

// AppendEnvelope appends env with its varint length prefix to b.
func AppendEnvelope(b []byte, env *pb.Envelope) ([]byte, error) {
	n := proto.Size(env)
	if n > MaxEnvelopeBytes {
		return b, fmt.Errorf("wire: envelope of %d bytes over limit %d", n, MaxEnvelopeBytes)
	}
	b = protowire.AppendVarint(b, uint64(n))
	// Size just cached every message's size: marshal need not size it again.
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, env)
}
