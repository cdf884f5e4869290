package kmod

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func newTestOwner() *Owner {
	return &Owner{
		family:   0x20,
		replies:  make(chan ownerReply, 16),
		requests: make(chan OOMRequest, 2),
		done:     make(chan struct{}),
	}
}

// errMsg builds an NLMSG_ERROR for request seq (capped, as NETLINK_CAP_ACK
// makes the kernel send), with an extended-ack message when msg != "".
func errMsg(t *testing.T, errno int32, seq uint32, msg string) syscall.NetlinkMessage {
	t.Helper()
	b := make([]byte, 4+unix.SizeofNlMsghdr)
	binary.NativeEndian.PutUint32(b[0:], uint32(-errno))
	binary.NativeEndian.PutUint32(b[4:], unix.SizeofNlMsghdr)
	binary.NativeEndian.PutUint16(b[8:], 0x20)
	binary.NativeEndian.PutUint32(b[4+8:], seq)
	flags := uint16(unix.NLM_F_CAPPED)
	if msg != "" {
		ae := netlink.NewAttributeEncoder()
		ae.String(unix.NLMSGERR_ATTR_MSG, msg)
		tlv, err := ae.Encode()
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, tlv...)
		flags |= unix.NLM_F_ACK_TLVS
	}
	return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.NLMSG_ERROR, Flags: flags}, Data: b}
}

func TestOwnerDispatchMatchesErrorsBySequence(t *testing.T) {
	o := newTestOwner()
	o.dispatch(errMsg(t, int32(unix.EBUSY), 7, "cgroup is watched by another socket"))
	o.dispatch(errMsg(t, 0, 8, ""))
	r := <-o.replies
	if r.seq != 7 || !r.ack || !errors.Is(r.err, unix.EBUSY) {
		t.Fatalf("first reply %+v, want seq 7 EBUSY", r)
	}
	if got := r.err.Error(); got != "device or resource busy: cgroup is watched by another socket" {
		t.Fatalf("error text %q", got)
	}
	r = <-o.replies
	if r.seq != 8 || !r.ack || r.err != nil {
		t.Fatalf("second reply %+v, want seq 8 ack", r)
	}
}

func TestOwnerDispatchRoutesOOMRequests(t *testing.T) {
	o := newTestOwner()
	ae := netlink.NewAttributeEncoder()
	ae.Uint64(AttrRequestID, 5)
	ae.Uint64(AttrCgroupID, 99)
	ae.Uint64(AttrUsageBytes, 1)
	ae.Uint64(AttrMaxBytes, 2)
	ae.Uint32(AttrNrPages, 1)
	attrs, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	req := syscall.NetlinkMessage{
		Header: syscall.NlMsghdr{Type: 0x20},
		Data:   append([]byte{CmdOOMRequest, FamilyVersion, 0, 0}, attrs...),
	}
	for i := 0; i < 3; i++ { // the third does not fit: counted as lost
		o.dispatch(req)
	}
	got := <-o.requests
	if got.ID != 5 || got.CgroupID != 99 {
		t.Fatalf("request %+v", got)
	}
	if o.Lost() != 1 {
		t.Fatalf("lost %d, want 1", o.Lost())
	}
	select {
	case r := <-o.replies:
		t.Fatalf("an OOM request reached the command path: %+v", r)
	default:
	}
	// A stats reply (same family, a sequence number) goes to the command.
	o.dispatch(syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: 0x20, Seq: 3}, Data: []byte{CmdGetStats, FamilyVersion, 0, 0}})
	if r := <-o.replies; r.seq != 3 || r.ack || r.cmd != CmdGetStats {
		t.Fatalf("stats reply %+v", r)
	}
}
