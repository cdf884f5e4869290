package kmod

import (
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"google.golang.org/protobuf/proto"

	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

type countSink struct {
	ooms []rescue.Event
	cpu  []*pb.CpuStat
}

func (c *countSink) CPU(st *pb.CpuStat)  { c.cpu = append(c.cpu, proto.Clone(st).(*pb.CpuStat)) }
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

// Throttle and near events from the scheduler become mid-period stats
// for the period in progress, numbered as its record will be; the
// period records around them keep their sequence; --throttle-poll 0
// (SetThrottleEvents(false)) drops the events, not the periods.
func TestSourceThrottleEvents(t *testing.T) {
	const period = 100e6
	s := &Source{byID: map[uint64]*watched{42: {h: 7}}, byH: map[uint32]uint64{7: 42}, pending: map[uint32]*pendingOOM{}}
	rec := func(kind source.Kind, ts uint64) source.Record {
		return source.Record{Kind: kind, CgroupID: 42, QuotaNs: 20e6, PeriodNs: period, TimestampNs: ts, NrThrottled: 3}
	}
	var sink countSink
	var st pb.CpuStat
	for _, r := range []source.Record{
		rec(source.KindPeriod, 1e9),              // seq 0
		rec(source.KindNear, 1e9+15e6),           // in period 1
		rec(source.KindThrottle, 1e9+20e6),       // in period 1
		rec(source.KindPeriod, 1e9+period),       // seq 1
		rec(source.KindThrottle, 1e9+3*period+5), // two idle periods: period 4
		rec(9, 1e9+3*period+6),                   // unknown kind: skipped
		{Kind: source.KindThrottle, CgroupID: 99, PeriodNs: period, TimestampNs: 2e9}, // not watched
	} {
		if s.fill(&st, r) {
			sink.CPU(&st)
		}
	}
	want := []struct {
		seq uint64
		mid bool
	}{{0, false}, {1, true}, {1, true}, {1, false}, {4, true}}
	if len(sink.cpu) != len(want) {
		t.Fatalf("got %d stats, want %d: %v", len(sink.cpu), len(want), sink.cpu)
	}
	for i, w := range want {
		c := sink.cpu[i]
		if c.PeriodSeq != w.seq || c.MidPeriod != w.mid || c.Handle != 7 || c.QuotaUs != 20000 {
			t.Errorf("stat %d: %v, want seq %d mid-period %v", i, c, w.seq, w.mid)
		}
		if w.mid && (c.NrThrottled != 3 || c.UsageUs != 0 || c.Throttled) {
			t.Errorf("event %d carries period fields: %v", i, c)
		}
	}
	s.SetThrottleEvents(false)
	if s.fill(&st, rec(source.KindThrottle, 1e9+3*period+10)) {
		t.Error("event delivered with throttle events off")
	}
	if !s.fill(&st, rec(source.KindPeriod, 1e9+4*period)) || st.MidPeriod {
		t.Error("period record dropped with throttle events off")
	}
}

// --throttle-near reaches the module as permille; a module without the
// parameter (no patch 4) and out-of-range shares are clear errors.
func TestSourceSetThrottleNear(t *testing.T) {
	p := t.TempDir() + "/throttle_near_permille"
	if err := os.WriteFile(p, []byte("950\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for share, want := range map[float64]string{0.9: "900", 0: "0", 1: "999", 0.9994: "999"} {
		if err := setNear(p, share); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Errorf("share %v wrote %q, want %q", share, b, want)
		}
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		if err := setNear(p, bad); err == nil {
			t.Errorf("share %v accepted", bad)
		}
	}
	err := setNear(t.TempDir()+"/absent", 0.9)
	if err == nil || !strings.Contains(err.Error(), "no throttle events") {
		t.Errorf("missing parameter: %v", err)
	}
}
