package kmod

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Owner is the socket that owns watches. escra.ko keys each watch by the
// netlink port of the socket that sent ESCRA_CMD_WATCH: only that socket
// may unwatch the cgroup, the cgroup's OOM requests are unicast to it
// alone, only it may answer them, and when it is closed (or its process
// dies) the module drops its watches and denies its pending requests.
//
// One goroutine reads the socket: OOM requests go to Requests(), the answer
// to a command goes to the command, matched by sequence number. Commands
// are serialized. Telemetry does not come here: it is multicast, on a
// socket of its own (Conn.Join(GroupTelemetry)), so records can never
// crowd an OOM request out of this socket's buffer.
type Owner struct {
	nc       *netlink.Conn
	family   uint16
	mu       sync.Mutex // one command in flight
	replies  chan ownerReply
	requests chan OOMRequest
	done     chan struct{}
	lost     uint64 // OOM requests dropped (full channel or socket)
	lostMu   sync.Mutex
}

type ownerReply struct {
	seq  uint32
	ack  bool   // NLMSG_ERROR: the end of the command
	err  error  // non-nil errno of the NLMSG_ERROR
	cmd  uint8  // genetlink command of a data reply
	data []byte // its attributes
}

// commandTimeout bounds a command's wait for the kernel's answer.
const commandTimeout = 5 * time.Second

// DialOwner opens an owner socket; ErrNoFamily when escra.ko is absent.
func DialOwner() (*Owner, error) {
	probe, err := Dial()
	if err != nil {
		return nil, err
	}
	family := probe.FamilyID()
	probe.Close()
	nc, err := netlink.Dial(unix.NETLINK_GENERIC, nil)
	if err != nil {
		return nil, fmt.Errorf("genl: dial owner socket: %w", err)
	}
	// Error replies carry no copy of the request; extended acks a message.
	_ = nc.SetOption(netlink.CapAcknowledge, true)
	_ = nc.SetOption(netlink.ExtendedAcknowledge, true)
	o := &Owner{
		nc:       nc,
		family:   family,
		replies:  make(chan ownerReply, 16),
		requests: make(chan OOMRequest, 1024),
		done:     make(chan struct{}),
	}
	rc, err := nc.SyscallConn()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("genl: owner socket: %w", err)
	}
	go o.read(rc)
	return o, nil
}

// Requests delivers the OOM requests of the owner's cgroups. It is closed
// when the socket is.
func (o *Owner) Requests() <-chan OOMRequest { return o.requests }

// Lost is the number of OOM requests dropped on the way (the kernel then
// times them out).
func (o *Owner) Lost() uint64 {
	o.lostMu.Lock()
	defer o.lostMu.Unlock()
	return o.lost
}

// Close closes the socket: the module drops this owner's watches.
func (o *Owner) Close() error {
	err := o.nc.Close()
	<-o.done
	return err
}

func (o *Owner) read(rc syscall.RawConn) {
	defer close(o.done)
	defer close(o.requests)
	buf := make([]byte, 1<<16)
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return // closed
		}
		if rerr == unix.ENOBUFS {
			o.lose() // requests were dropped; the kernel times them out
			continue
		}
		if rerr != nil || n == 0 {
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			o.dispatch(m)
		}
	}
}

func (o *Owner) lose() {
	o.lostMu.Lock()
	o.lost++
	o.lostMu.Unlock()
}

func (o *Owner) dispatch(m syscall.NetlinkMessage) {
	switch {
	case m.Header.Type == unix.NLMSG_ERROR:
		if len(m.Data) < 4+unix.SizeofNlMsghdr {
			return
		}
		code := int32(binary.NativeEndian.Uint32(m.Data[:4]))
		seq := binary.NativeEndian.Uint32(m.Data[4+8:])
		r := ownerReply{seq: seq, ack: true}
		if code != 0 {
			r.err = unix.Errno(-code)
			if msg := extackMessage(m); msg != "" {
				r.err = &kernelError{errno: unix.Errno(-code), msg: msg}
			}
		}
		o.reply(r)
	case m.Header.Type == o.family && len(m.Data) >= 4:
		cmd, data := m.Data[0], m.Data[4:]
		if cmd == CmdOOMRequest && m.Header.Seq == 0 {
			req, err := DecodeOOMRequest(data)
			if err != nil {
				return
			}
			select {
			case o.requests <- req:
			default:
				o.lose()
			}
			return
		}
		o.reply(ownerReply{seq: m.Header.Seq, cmd: cmd, data: append([]byte(nil), data...)})
	}
}

func (o *Owner) reply(r ownerReply) {
	select {
	case o.replies <- r:
	default: // nobody waits (a command gave up): drop
	}
}

// kernelError keeps the errno (errors.Is works) and the extended ack text.
type kernelError struct {
	errno unix.Errno
	msg   string
}

func (e *kernelError) Error() string { return e.errno.Error() + ": " + e.msg }
func (e *kernelError) Unwrap() error { return e.errno }

// extackMessage returns NLMSGERR_ATTR_MSG of an error with extended ack.
func extackMessage(m syscall.NetlinkMessage) string {
	if m.Header.Flags&unix.NLM_F_ACK_TLVS == 0 {
		return ""
	}
	// errno, then the request's header (capped: no payload), then TLVs.
	off := 4 + unix.SizeofNlMsghdr
	if m.Header.Flags&unix.NLM_F_CAPPED == 0 && len(m.Data) >= 4+4 {
		off = 4 + int(binary.NativeEndian.Uint32(m.Data[4:]))
		off = (off + 3) &^ 3
	}
	if off > len(m.Data) {
		return ""
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[off:])
	if err != nil {
		return ""
	}
	for ad.Next() {
		if ad.Type() == unix.NLMSGERR_ATTR_MSG {
			return ad.String()
		}
	}
	return ""
}

// do sends one command and waits for its acknowledgement; a data reply
// with the same sequence number comes back too.
func (o *Owner) do(cmd uint8, attrs []byte) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := make([]byte, 4, 4+len(attrs))
	b[0], b[1] = cmd, FamilyVersion
	b = append(b, attrs...)
	req, err := o.nc.Send(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(o.family), Flags: netlink.Request | netlink.Acknowledge},
		Data:   b,
	})
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(commandTimeout)
	defer timer.Stop()
	var data []byte
	for {
		select {
		case r := <-o.replies:
			if r.seq != req.Header.Sequence {
				continue // a late answer to a command that gave up
			}
			if !r.ack {
				data = r.data
				continue
			}
			return data, r.err
		case <-o.done:
			return nil, errors.New("genl: owner socket closed")
		case <-timer.C:
			return nil, fmt.Errorf("genl: no answer from the kernel in %v", commandTimeout)
		}
	}
}

// Do sends a command with raw attributes (tests send malformed ones).
func (o *Owner) Do(cmd uint8, attrs []byte) error {
	_, err := o.do(cmd, attrs)
	return err
}

// Watch makes this socket the owner of the cgroup's watch (cgroup v2 id).
// EBUSY when another socket owns it. Needs CAP_NET_ADMIN.
func (o *Owner) Watch(cgroupID uint64) error {
	b, err := EncodeCgroup(cgroupID)
	if err != nil {
		return err
	}
	if _, err := o.do(CmdWatch, b); err != nil {
		return fmt.Errorf("genl: watch cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// Unwatch drops this socket's watch; EBUSY when another socket owns it.
func (o *Owner) Unwatch(cgroupID uint64) error {
	b, err := EncodeCgroup(cgroupID)
	if err != nil {
		return err
	}
	if _, err := o.do(CmdUnwatch, b); err != nil {
		return fmt.Errorf("genl: unwatch cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// ReplyOOM answers a request this socket received. Grant only after
// memory.max was raised: the faulting task retries at once.
func (o *Owner) ReplyOOM(requestID uint64, granted bool) error {
	b, err := EncodeOOMReply(requestID, granted)
	if err != nil {
		return err
	}
	if _, err := o.do(CmdOOMReply, b); err != nil {
		return fmt.Errorf("genl: oom reply %d: %w", requestID, err)
	}
	return nil
}

// Stats reads the module's counters.
func (o *Owner) Stats() (Stats, error) {
	data, err := o.do(CmdGetStats, nil)
	if err != nil {
		return Stats{}, fmt.Errorf("genl: get stats: %w", err)
	}
	if data == nil {
		return Stats{}, malformed("no stats reply")
	}
	return DecodeStats(data)
}
