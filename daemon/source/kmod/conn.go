package kmod

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"

	"github.com/escra-dev/escra/daemon/source"
)

// ErrNoFamily means the escra family is not registered: escra.ko is not
// loaded, or the kernel lacks the Escra hooks and the module refused to
// load. escrad then falls back to its cgroupfs backend.
var ErrNoFamily = errors.New("genl: escra generic netlink family not found (escra.ko not loaded or kernel without Escra hooks)")

// Conn is a generic netlink socket bound to the escra family.
type Conn struct {
	c      *genetlink.Conn
	family genetlink.Family
	groups map[string]uint32
}

// Dial opens a socket and resolves the escra family and its groups.
func Dial() (*Conn, error) {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("genl: dial: %w", err)
	}
	f, err := c.GetFamily(FamilyName)
	if err != nil {
		c.Close()
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrNoFamily
		}
		return nil, fmt.Errorf("genl: resolve family %q: %w", FamilyName, err)
	}
	if f.Version != FamilyVersion {
		c.Close()
		return nil, fmt.Errorf("genl: family %q has version %d, want %d", FamilyName, f.Version, FamilyVersion)
	}
	groups := make(map[string]uint32, len(f.Groups))
	for _, g := range f.Groups {
		groups[g.Name] = g.ID
	}
	return &Conn{c: c, family: f, groups: groups}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.c.Close() }

// FamilyID is the family's dynamic netlink id.
func (c *Conn) FamilyID() uint16 { return c.family.ID }

// Raw is the underlying socket, for tests that send malformed requests.
func (c *Conn) Raw() *genetlink.Conn { return c.c }

// Join subscribes to a multicast group (GroupTelemetry; needs CAP_SYS_ADMIN).
func (c *Conn) Join(group string) error {
	id, ok := c.groups[group]
	if !ok {
		return fmt.Errorf("genl: family %q has no group %q", FamilyName, group)
	}
	if err := c.c.JoinGroup(id); err != nil {
		return fmt.Errorf("genl: join %q: %w", group, err)
	}
	return nil
}

// SetReadBuffer sizes the receive buffer; telemetry bursts need room.
func (c *Conn) SetReadBuffer(bytes int) error { return c.c.SetReadBuffer(bytes) }

// SetReadDeadline bounds the next Receive.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

// Do sends one request with attributes and waits for the acknowledgement.
// Kernel errors come back wrapped; errors.Is(err, unix.EPERM) works.
func (c *Conn) Do(cmd uint8, attrs []byte) ([]genetlink.Message, error) {
	return c.do(cmd, attrs, netlink.Request|netlink.Acknowledge)
}

func (c *Conn) do(cmd uint8, attrs []byte, flags netlink.HeaderFlags) ([]genetlink.Message, error) {
	msg := genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: FamilyVersion},
		Data:   attrs,
	}
	return c.c.Execute(msg, c.family.ID, flags)
}

// Watch starts per-period telemetry and OOM interception for a cgroup v2
// cgroup (its id is the inode number of its directory). Needs CAP_NET_ADMIN.
// This socket becomes the watch's owner and gets its OOM requests, which a
// Conn does not read: use Owner where OOMs are expected.
func (c *Conn) Watch(cgroupID uint64) error {
	b, err := EncodeCgroup(cgroupID)
	if err != nil {
		return err
	}
	if _, err := c.Do(CmdWatch, b); err != nil {
		return fmt.Errorf("genl: watch cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// Unwatch stops reporting a cgroup.
func (c *Conn) Unwatch(cgroupID uint64) error {
	b, err := EncodeCgroup(cgroupID)
	if err != nil {
		return err
	}
	if _, err := c.Do(CmdUnwatch, b); err != nil {
		return fmt.Errorf("genl: unwatch cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// ReplyOOM answers an OOM request. Grant only after memory.max was raised:
// the kernel retries the charge at once.
func (c *Conn) ReplyOOM(requestID uint64, granted bool) error {
	b, err := EncodeOOMReply(requestID, granted)
	if err != nil {
		return err
	}
	if _, err := c.Do(CmdOOMReply, b); err != nil {
		return fmt.Errorf("genl: oom reply %d: %w", requestID, err)
	}
	return nil
}

// Stats reads the module's counters.
func (c *Conn) Stats() (Stats, error) {
	// No Acknowledge: the reply is the answer, and an extra ACK would be
	// left queued for the next request (mismatched sequence).
	msgs, err := c.do(CmdGetStats, nil, netlink.Request)
	if err != nil {
		return Stats{}, fmt.Errorf("genl: get stats: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Command == CmdGetStats {
			return DecodeStats(m.Data)
		}
	}
	return Stats{}, malformed("no stats reply")
}

// Event is one decoded multicast message: either Records or OOM is set.
type Event struct {
	Records []source.Record
	OOM     *OOMRequest
}

// Receive blocks for the next batch of multicast messages and decodes them.
// Messages of other commands are skipped; a malformed one is an error that
// leaves the connection usable.
func (c *Conn) Receive() ([]Event, error) {
	msgs, _, err := c.c.Receive()
	if err != nil {
		return nil, err
	}
	var evs []Event
	var bad error
	for _, m := range msgs {
		switch m.Header.Command {
		case CmdTelemetry:
			recs, err := DecodeTelemetry(m.Data)
			if err != nil {
				bad = err
				continue
			}
			evs = append(evs, Event{Records: recs})
		case CmdOOMRequest:
			req, err := DecodeOOMRequest(m.Data)
			if err != nil {
				bad = err
				continue
			}
			evs = append(evs, Event{OOM: &req})
		}
	}
	if len(evs) == 0 && bad != nil {
		return nil, bad
	}
	return evs, nil
}
