package kmod

import (
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/escra-dev/escra/daemon/rescue"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

type countSink struct{ ooms []rescue.Event }

func (c *countSink) CPU(*pb.CpuStat)     {}
func (c *countSink) Flush()              {}
func (c *countSink) OOM(ev rescue.Event) { c.ooms = append(c.ooms, ev) }

// Requests of one group during an episode reach the agent once; one still
// unanswered after redeliverAfter is handed over again (the agent skips
// events while a verdict is in flight).
func TestSourceOOMEpisodes(t *testing.T) {
	s := &Source{byID: map[uint64]*watched{42: {h: 7}}, byH: map[uint32]uint64{7: 42}, pending: map[uint32]*pendingOOM{}}
	var sink countSink
	s.oom(OOMRequest{ID: 1, CgroupID: 42, MaxBytes: 32 << 20}, &sink)
	s.oom(OOMRequest{ID: 2, CgroupID: 42, MaxBytes: 32 << 20}, &sink)
	if len(sink.ooms) != 1 || sink.ooms[0].Handle != 7 || sink.ooms[0].Limit != 32<<20 {
		t.Fatalf("events after two requests: %+v, want one for handle 7", sink.ooms)
	}
	if got := s.pending[7].ids; len(got) != 2 {
		t.Fatalf("pending ids %v, want both", got)
	}
	s.redeliver(&sink)
	if len(sink.ooms) != 1 {
		t.Fatalf("redelivered a fresh event: %d events", len(sink.ooms))
	}
	s.pending[7].delivered = time.Now().Add(-2 * redeliverAfter)
	s.redeliver(&sink)
	if len(sink.ooms) != 2 || sink.ooms[1].Handle != 7 {
		t.Fatalf("stale event not redelivered: %+v", sink.ooms)
	}
	// A verdict with nothing pending is a no-op (Resolve is idempotent).
	delete(s.pending, 7)
	if err := s.reply(7, true); err != nil {
		t.Fatal(err)
	}
}

// The pages the kernel's held charge wanted (ESCRA_A_NR_PAGES) reach the
// sink's event, from the owner socket's message through the codec.
func TestSourceOOMCarriesPages(t *testing.T) {
	o := newTestOwner()
	ae := netlink.NewAttributeEncoder()
	ae.Uint64(AttrRequestID, 11)
	ae.Uint64(AttrCgroupID, 42)
	ae.Uint64(AttrUsageBytes, 32<<20)
	ae.Uint64(AttrMaxBytes, 32<<20)
	ae.Uint32(AttrNrPages, 512)
	attrs, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	o.dispatch(syscall.NetlinkMessage{
		Header: syscall.NlMsghdr{Type: 0x20},
		Data:   append([]byte{CmdOOMRequest, FamilyVersion, 0, 0}, attrs...),
	})
	req := <-o.requests
	s := &Source{ctl: o, byID: map[uint64]*watched{42: {h: 7}}, byH: map[uint32]uint64{7: 42}, pending: map[uint32]*pendingOOM{}}
	var sink countSink
	s.oom(req, &sink)
	if len(sink.ooms) != 1 || sink.ooms[0].Pages != 512 || sink.ooms[0].Handle != 7 || sink.ooms[0].Limit != 32<<20 {
		t.Fatalf("events %+v, want one for handle 7 wanting 512 pages", sink.ooms)
	}
	// A redelivered event still says what the charge wanted.
	s.pending[7].delivered = time.Now().Add(-2 * redeliverAfter)
	s.redeliver(&sink)
	if len(sink.ooms) != 2 || sink.ooms[1].Pages != 512 {
		t.Fatalf("redelivered %+v, want 512 pages", sink.ooms)
	}
}
