package link

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

var errDown = errors.New("link: controller not connected")

// send writes one envelope; bodies are escrapb.Envelope_* wrappers.
func (c *Client) send(reqID uint64, b any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sendLocked(reqID, b)
}

func (c *Client) sendLocked(reqID uint64, b any) error {
	if c.conn == nil {
		return errDown
	}
	c.out.RequestId = reqID
	switch v := b.(type) {
	case *escrapb.Envelope_Register:
		c.out.Body = v
	case *escrapb.Envelope_Unregister:
		c.out.Body = v
	case *escrapb.Envelope_MemoryUsage:
		c.out.Body = v
	case *escrapb.Envelope_OomRequest:
		c.out.Body = v
	case *escrapb.Envelope_SetLimitsAck:
		c.out.Body = v
	case *escrapb.Envelope_ReclaimResult:
		c.out.Body = v
	case *escrapb.Envelope_Heartbeat:
		c.out.Body = v
	case *escrapb.Envelope_CreateContainerResult:
		c.out.Body = v
	case *escrapb.Envelope_RemoveContainersResult:
		c.out.Body = v
	case *escrapb.Envelope_Error:
		c.out.Body = v
	case *escrapb.Envelope_CpuLeaseUse:
		c.out.Body = v
	case *escrapb.Envelope_CpuLeaseReturn:
		c.out.Body = v
	case *escrapb.Envelope_MemCreditUse:
		c.out.Body = v
	case *escrapb.Envelope_MemCreditReturn:
		c.out.Body = v
	case *escrapb.Envelope_CpuPlacementAnswer:
		c.out.Body = v
	case *escrapb.Envelope_ImageState:
		c.out.Body = v
	default:
		return fmt.Errorf("link: cannot send %T", b)
	}
	// Marshalled now: the caller may reuse its message once we return.
	frame, err := wire.AppendEnvelope(nil, &c.out)
	c.out.Body = nil
	if err != nil {
		return err
	}
	select {
	case c.q <- frame:
		return nil
	default:
		// The controller has not read sendQueueLen envelopes: the session
		// is as good as dead. The reader sees the close and reconnects.
		c.conn.Close()
		return errQueueFull
	}
}

// sendQueueLen bounds the envelopes waiting for the socket: a host's
// registrations at connect (up to a few thousand containers) fit.
const sendQueueLen = 8192

var errQueueFull = errors.New("link: controller not reading: send queue full, session closed")

// writer writes the session's queued frames in order, several per write
// when they are waiting, until the session ends or a write fails.
func (c *Client) writer(conn net.Conn, q <-chan []byte, done <-chan struct{}) {
	var buf []byte
	for {
		select {
		case <-done:
			return
		case f := <-q:
			buf = append(buf[:0], f...)
		}
	drain:
		for len(buf) < 64<<10 {
			select {
			case f := <-q:
				buf = append(buf, f...)
			default:
				break drain
			}
		}
		conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(buf); err != nil {
			conn.Close() // the reader sees the error and reconnects
			return
		}
	}
}
