// Package ingest reads the daemons' per-period CPU statistics (Escra
// §IV-B): one TelemetryBatch per UDP datagram, decoded by a Decoder
// (decode.go, what wire.DecodeBatch accepts, without allocating), checked,
// and handed to a Sink. The sliding windows
// over the last n periods live with each member in the allocator.
package ingest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/internal/ratelog"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// Stat is one container's period, named by its host-local handle. A
// MidPeriod stat is a throttle event for period Seq, which has not ended:
// only Seq and QuotaUs are meaningful (proto CpuStat.mid_period).
type Stat struct {
	Handle    uint32
	MidPeriod bool
	allocator.Stat
}

// Sink receives one datagram's stats. It must not keep stats after it
// returns (the slice is reused).
type Sink func(session uint32, stats []Stat, receivedNs int64)

// Drop reasons (metric labels).
const (
	DropOversized = "oversized"
	DropMalformed = "malformed"
	DropAbsurd    = "absurd"
	// Authenticated mode: bad or missing tag, and a batch_seq seen before.
	DropForged   = "forged"
	DropReplayed = "replayed"
	// DropUnknownSession: authenticated mode, no open session has the
	// datagram's id. Mostly the last datagrams of a session that just
	// closed (a daemon reconnecting, make soak); a made-up id lands here
	// too. Dropped like a forgery, but not reported as one.
	DropUnknownSession = "unknown_session"
)

// SessionKnower, when an Authenticator implements it, tells a datagram of
// no open session (DropUnknownSession) from a bad tag on an open session
// (DropForged).
type SessionKnower interface {
	Known(session uint32) bool
}

// Authenticator checks one datagram in authenticated mode: Verify checks
// the trailing tag with the session's key (found from the unverified
// session id; an unknown session fails), Accept records the batch_seq in
// the session's replay window. Both are called one datagram at a time,
// from the listener's goroutines (under its lock).
type Authenticator interface {
	Verify(session uint32, datagram []byte) bool
	Accept(session uint32, batchSeq uint64) bool
}

// Decode parses a datagram into out (reused) with wire.DecodeBatch,
// resolving each stat's period (the Listener uses a Decoder, which
// agrees with it). Stats with no period or absurd fields are dropped and counted
// in bad; the batch is still used.
func Decode(data []byte, batch *pb.TelemetryBatch, out []Stat) (session uint32, stats []Stat, bad int, err error) {
	if err := wire.DecodeBatch(data, batch); err != nil {
		return 0, out[:0], 0, err
	}
	stats, bad = convert(batch, out)
	return batch.SessionId, stats, bad, nil
}

// convert resolves the stats of a decoded batch (see Decode).
func convert(batch *pb.TelemetryBatch, out []Stat) (stats []Stat, bad int) {
	out = out[:0]
	for _, s := range batch.Stats {
		p := s.GetPeriodUs()
		if p == 0 {
			p = batch.PeriodUs
		}
		if p == 0 || p > 1_000_000 || s.GetUnusedUs() < 0 || s.GetQuotaUs() < -1 ||
			s.GetUnusedUs() > 1_000_000_000 || s.GetQuotaUs() > 1_000_000_000 || s.GetUsageUs() > 1<<40 {
			bad++
			continue
		}
		out = append(out, Stat{Handle: s.GetHandle(), MidPeriod: s.GetMidPeriod(), Stat: allocator.Stat{
			Seq: s.GetPeriodSeq(), QuotaUs: s.GetQuotaUs(), PeriodUs: int64(p),
			UnusedUs: s.GetUnusedUs(), Throttled: s.GetThrottled(), UsageUs: int64(s.GetUsageUs()),
		}})
	}
	return out, bad
}

// Counters of the ingest.
type Counters struct {
	Datagrams, Stats, Bytes atomic.Uint64
	// Pinned counts the datagrams read from per-session sockets (pinned.go).
	Pinned atomic.Uint64
}

// Listener reads telemetry datagrams: from the shared socket bound to
// the telemetry address, and from the per-session sockets (pinned.go).
type Listener struct {
	conn  *net.UDPConn
	local netip.AddrPort
	sink  Sink
	drop  func(reason string, n int)
	log   *ratelog.Limiter
	// Auth, when set before Serve, makes every datagram carry a tag
	// (wire.TagBytes); nothing unauthenticated or replayed reaches the sink.
	Auth Authenticator
	C    Counters

	buckets sourceBuckets // the shared socket's (limits.go)
	pins    pins          // pinned.go

	// mu takes one datagram at a time past the buckets, whichever socket
	// it came from: Auth, the sink and the buffers below see one caller.
	mu    sync.Mutex
	dec   Decoder
	stats []Stat
}

// Listen binds addr (":0" allowed).
func Listen(addr string, sink Sink, drop func(reason string, n int), log *ratelog.Limiter) (*Listener, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	c, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	c.SetReadBuffer(8 << 20) // absorb a burst of a whole period from many hosts
	return &Listener{conn: c, local: c.LocalAddr().(*net.UDPAddr).AddrPort(), sink: sink, drop: drop, log: log}, nil
}

// Addr is the bound address.
func (l *Listener) Addr() string { return l.conn.LocalAddr().String() }

// Close stops Serve.
func (l *Listener) Close() error { return l.conn.Close() }

// Serve reads until ctx ends or the listener closes; the per-session
// sockets are closed and their readers done when it returns.
func (l *Listener) Serve(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { l.conn.Close() })
	defer stop()
	defer l.closePins()
	l.read(l.conn, &l.buckets, true)
}

// read serves one socket until it is closed; buckets is its own.
func (l *Listener) read(conn *net.UDPConn, buckets *sourceBuckets, shared bool) {
	buf := make([]byte, 64<<10) // larger than allowed, to see oversized datagrams
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond) // transient (e.g. ICMP-induced); don't spin
			continue
		}
		now := time.Now()
		l.C.Datagrams.Add(1)
		l.C.Bytes.Add(uint64(n))
		if !shared {
			l.C.Pinned.Add(1)
		}
		if !buckets.allow(from.Addr(), now) {
			l.drop(DropRateLimited, 1)
			l.warn(from, "telemetry over its source's rate dropped", nil)
			continue
		}
		if sess, ok := l.take(buf[:n], from, now.UnixNano()); ok && shared {
			l.pin(sess, from)
		}
	}
}

// take checks one datagram and hands its stats to the sink; ok when it
// was authenticated (so its session may get its own socket).
func (l *Listener) take(data []byte, from netip.AddrPort, recv int64) (session uint32, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(data)
	var head batchHead
	if l.Auth != nil {
		// The session id is read from the unverified batch only to find
		// the key; nothing of it is used before the tag checks out.
		if n <= wire.TagBytes {
			l.drop(DropForged, 1)
			l.warn(from, "telemetry datagram without a tag dropped", nil)
			return 0, false
		}
		var err error
		if head, err = l.dec.parse(data[:n-wire.TagBytes]); err != nil {
			l.drop(DropForged, 1)
			l.warn(from, "unauthenticated telemetry datagram dropped", err)
			return 0, false
		}
		if sc, ok := l.Auth.(SourceChecker); ok && !sc.FromPeer(head.session, from.Addr().Unmap()) {
			l.drop(DropWrongSource, 1)
			l.warn(from, "telemetry datagram not from its session's peer address dropped", nil)
			return 0, false
		}
		if !l.Auth.Verify(head.session, data) {
			if k, ok := l.Auth.(SessionKnower); ok && !k.Known(head.session) {
				l.drop(DropUnknownSession, 1)
				l.warn(from, "telemetry datagram of no open session dropped (closed or unknown session)", nil)
				return 0, false
			}
			l.drop(DropForged, 1)
			l.warn(from, "forged telemetry datagram dropped", nil)
			return 0, false
		}
		if !l.Auth.Accept(head.session, head.batchSeq) {
			l.drop(DropReplayed, 1)
			l.warn(from, "replayed telemetry datagram dropped", nil)
			return 0, false
		}
	}
	var sess uint32
	var bad int
	var err error
	if l.Auth != nil {
		sess = head.session
		l.stats, bad = l.dec.convert(head, l.stats)
	} else {
		sess, l.stats, bad, err = l.dec.Decode(data, l.stats)
	}
	if err != nil {
		reason := DropMalformed
		if errors.Is(err, wire.ErrDatagramTooLarge) {
			reason = DropOversized
		}
		l.drop(reason, 1)
		l.warn(from, "telemetry datagram dropped", err)
		return 0, false
	}
	if bad > 0 {
		l.drop(DropAbsurd, bad)
		l.warn(from, "telemetry stats with absurd values dropped", nil)
	}
	l.C.Stats.Add(uint64(len(l.stats)))
	if len(l.stats) > 0 {
		l.sink(sess, l.stats, recv)
	}
	return sess, l.Auth != nil
}

func (l *Listener) warn(from netip.AddrPort, msg string, err error) {
	if l.log != nil {
		l.log.Warn(from.String(), msg, "err", err)
	}
}
