package ingest

import (
	"net/netip"
	"time"

	"golang.org/x/time/rate"
)

// Telemetry flood defences, cheapest first: a token bucket per source
// address (before anything is decoded), then, in authenticated mode, the
// source checked against the address of the session the datagram names
// (before its HMAC is computed). A flood from one address then costs the
// listener a map lookup per datagram and cannot starve the others'
// buckets; spoofed sources fail the session check.

// Drop reasons of the defences (metric labels).
const (
	DropRateLimited = "rate_limited" // over its source's token bucket
	DropWrongSource = "wrong_source" // not from its session's peer address
)

// SourceChecker, when an Authenticator implements it, tells whether a
// datagram naming session may come from addr (the session's TCP peer).
type SourceChecker interface {
	FromPeer(session uint32, addr netip.Addr) bool
}

// maxSources bounds the bucket map; past it the buckets start over (a
// flood of many addresses resets them, it cannot grow the map).
const maxSources = 4096

type sourceBuckets struct {
	limit rate.Limit
	burst int
	m     map[netip.Addr]*rate.Limiter
}

// allow takes one token from addr's bucket; with no limit set it always
// allows. Each socket's reader has its own buckets.
func (b *sourceBuckets) allow(addr netip.Addr, now time.Time) bool {
	if b.limit <= 0 {
		return true
	}
	addr = addr.Unmap()
	l := b.m[addr]
	if l == nil {
		if b.m == nil || len(b.m) >= maxSources {
			b.m = make(map[netip.Addr]*rate.Limiter)
		}
		l = rate.NewLimiter(b.limit, b.burst)
		b.m[addr] = l
	}
	return l.AllowN(now, 1)
}

// LimitPerSource sets every source address's token bucket: perSecond
// datagrams a second with bursts of burst (perSecond <= 0: no limit).
// Call before Serve.
func (l *Listener) LimitPerSource(perSecond float64, burst int) {
	l.buckets = sourceBuckets{limit: rate.Limit(perSecond), burst: max(burst, 1)}
}
