package ingest

import (
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Per-session sockets (docs/security.md, "Telemetry flood"). A flood of
// the telemetry port fills the shared socket's receive buffer faster
// than one reader drains it, and the kernel then drops legitimate
// datagrams with the flood before user space can tell them apart. So,
// once a session's first datagram is authenticated, the listener opens a
// socket of its own for that session: bound to the telemetry address and
// connect()ed to the datagram's source. Linux delivers a datagram to the
// connected socket whose 4-tuple matches it before any unconnected one
// (udp4_lib_lookup2 scores an exact match higher, also within SO_REUSEPORT
// groups once reuseport_has_conns), so the host's telemetry lands in its
// own receive buffer and a flood from other sources fills only the
// shared one. The shared socket stays for first contact and for sessions
// whose socket could not be opened; a per-session socket reads like the
// shared one (its own token bucket, then the same checks under mu).

// pinnedReadBuffer holds a few seconds of one host's datagrams.
const pinnedReadBuffer = 1 << 20

type pins struct {
	mu     sync.Mutex
	on     bool
	limit  int // at most this many open sockets (0: one per open session)
	open   int
	closed bool
	bySess map[uint32]*pin
	byFrom map[netip.AddrPort]uint32
	wg     sync.WaitGroup
}

// pin is one session's socket; conn is nil when opening it failed (the
// session stays on the shared socket until it ends).
type pin struct {
	from netip.AddrPort
	conn *net.UDPConn
}

// PinSessions gives each authenticated session a socket of its own, at
// most limit of them (0: no cap beyond the open sessions, which each
// hold one). Needs an Auth that implements SessionKnower; call before
// Serve.
func (l *Listener) PinSessions(limit int) {
	l.pins = pins{on: true, limit: limit, bySess: map[uint32]*pin{}, byFrom: map[netip.AddrPort]uint32{}}
}

// Pins is the number of open per-session sockets.
func (l *Listener) Pins() int {
	l.pins.mu.Lock()
	defer l.pins.mu.Unlock()
	return l.pins.open
}

// EndSession closes the session's socket, if it has one (any goroutine).
func (l *Listener) EndSession(session uint32) {
	p := &l.pins
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remove(session)
}

func (p *pins) remove(session uint32) {
	old := p.bySess[session]
	if old == nil {
		return
	}
	delete(p.bySess, session)
	if old.conn != nil {
		delete(p.byFrom, old.from)
		old.conn.Close()
		p.open--
	}
}

// pin opens a socket for session, connected to from, after an
// authenticated datagram of it came in on the shared socket. Called by
// the shared socket's reader only.
func (l *Listener) pin(session uint32, from netip.AddrPort) {
	k, ok := l.Auth.(SessionKnower)
	p := &l.pins
	if !ok || !p.on {
		return
	}
	p.mu.Lock()
	if old := p.bySess[session]; old != nil && (old.from == from || old.conn == nil) {
		p.mu.Unlock() // a datagram queued before its socket was open, or a failed one
		return
	}
	p.remove(session) // its source moved (a NAT rebinding): follow it
	_, taken := p.byFrom[from]
	full := p.limit > 0 && p.open >= p.limit
	p.mu.Unlock()
	if taken || full { // a relay sending for several sessions keeps one socket
		return
	}
	conn, err := l.dialPinned(from)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		if conn != nil {
			conn.Close()
		}
		return
	}
	if err != nil {
		p.bySess[session] = &pin{from: from}
		p.mu.Unlock()
		if l.log != nil {
			l.log.Warn("telemetry-pin", "session's own telemetry socket not opened; it stays on the shared one", "session", session, "from", from.String(), "err", err)
		}
		return
	}
	p.bySess[session] = &pin{from: from, conn: conn}
	p.byFrom[from] = session
	p.open++
	b := sourceBuckets{limit: l.buckets.limit, burst: l.buckets.burst}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); l.read(conn, &b, false) }()
	p.mu.Unlock()
	// The session may have ended since its datagram was verified; its
	// EndSession then found nothing to close.
	if !k.Known(session) {
		l.EndSession(session)
	}
}

// dialPinned opens a socket bound to the shared socket's address and
// connected to from. The shared socket takes SO_REUSEPORT only while the
// new one binds: another process (a second controller on the same port)
// still gets EADDRINUSE, as without per-session sockets.
func (l *Listener) dialPinned(from netip.AddrPort) (*net.UDPConn, error) {
	if err := setReusePort(l.conn, 1); err != nil {
		return nil, err
	}
	defer setReusePort(l.conn, 0)
	d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(l.local), Control: func(_, _ string, c syscall.RawConn) error {
		return reusePort(c, 1)
	}}
	c, err := d.Dial("udp", from.String())
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UDPConn)
	uc.SetReadBuffer(pinnedReadBuffer)
	return uc, nil
}

func setReusePort(c *net.UDPConn, v int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return reusePort(rc, v)
}

func reusePort(c syscall.RawConn, v int) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, v)
	}); err != nil {
		return err
	}
	return serr
}

// closePins closes every per-session socket and waits for their readers
// (Serve's end).
func (l *Listener) closePins() {
	p := &l.pins
	p.mu.Lock()
	p.closed = true
	for s := range p.bySess {
		p.remove(s)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
