package main

import (
	"io"
	"net"
	"sync"
)

// gateProxy relays one host's TCP session and UDP telemetry to the
// controller and can cut them: a partition without iptables, so the bench
// changes nothing other users of the machine share. While cut, TCP bytes
// are held (not read from the socket, as a DROP with retransmission would
// hold them: nothing is lost, both ends just hear nothing) and datagrams
// are dropped (as UDP under DROP). Connections opened while cut wait
// silently, as a SYN would; a heal lets everything flow again.
type gateProxy struct {
	ln      net.Listener
	udp     *net.UDPConn
	tcpTo   string
	udpTo   *net.UDPAddr
	mu      sync.Mutex
	open    chan struct{} // closed while traffic flows
	conns   map[net.Conn]bool
	udpPeer map[string]*net.UDPConn // client address -> its upstream socket
	closed  bool
	network string // "tcp" or "unix"
	down    bool   // refusing: as a dead server, connections are closed at once
}

// newGateProxy listens on tcpAt and udpAt (host:port; port 0 for TCP is
// fine); the UDP target is set later (setUDPTarget) because the controller
// is told the proxy's UDP address before it starts.
func newGateProxy(tcpAt, udpAt string) (*gateProxy, error) {
	ln, err := net.Listen("tcp", tcpAt)
	if err != nil {
		return nil, err
	}
	ua, err := net.ResolveUDPAddr("udp", udpAt)
	if err != nil {
		ln.Close()
		return nil, err
	}
	uc, err := net.ListenUDP("udp", ua)
	if err != nil {
		ln.Close()
		return nil, err
	}
	p := &gateProxy{ln: ln, udp: uc, open: make(chan struct{}), conns: map[net.Conn]bool{}, udpPeer: map[string]*net.UDPConn{}, network: "tcp"}
	close(p.open)
	return p, nil
}

// newUnixProxy relays a unix socket (the Docker engine's) with the same
// cut/heal, plus setDown: an engine that is gone (connections closed,
// new ones refused) rather than hung.
func newUnixProxy(at, target string) (*gateProxy, error) {
	ln, err := net.Listen("unix", at)
	if err != nil {
		return nil, err
	}
	p := &gateProxy{ln: ln, open: make(chan struct{}), conns: map[net.Conn]bool{}, network: "unix", tcpTo: target}
	close(p.open)
	go p.acceptLoop()
	return p, nil
}

func (p *gateProxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	var cs []net.Conn
	if down {
		for c := range p.conns {
			cs = append(cs, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (p *gateProxy) addr() string { return p.ln.Addr().String() }

// start relays to the controller's session address tcpTo and telemetry
// address udpTo.
func (p *gateProxy) start(tcpTo, udpTo string) error {
	ua, err := net.ResolveUDPAddr("udp", udpTo)
	if err != nil {
		return err
	}
	p.tcpTo, p.udpTo = tcpTo, ua
	go p.acceptLoop()
	go p.udpLoop()
	return nil
}

// gate returns a channel that is closed while traffic may flow.
func (p *gateProxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *gateProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

func (p *gateProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

func (p *gateProxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && (p.closed || p.down) {
		return false
	}
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *gateProxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *gateProxy) serve(c net.Conn) {
	if !p.track(c, true) {
		c.Close()
		return
	}
	defer p.track(c, false)
	defer c.Close()
	<-p.gate() // a connection attempt during a cut waits, as a dropped SYN
	up, err := net.Dial(p.network, p.tcpTo)
	if err != nil {
		return
	}
	if !p.track(up, true) {
		up.Close()
		return
	}
	defer p.track(up, false)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { p.copy(up, c); done <- struct{}{} }()
	go func() { p.copy(c, up); done <- struct{}{} }()
	<-done
}

// copy forwards src to dst, holding what it read while the gate is shut.
func (p *gateProxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if c, ok := dst.(*net.TCPConn); ok {
				c.CloseWrite()
			}
			return
		}
		<-p.gate() // stop reading while cut: the sender's socket buffers fill
	}
}

func (p *gateProxy) udpLoop() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		select {
		case <-p.gate():
		default:
			continue // dropped, as under a DROP rule
		}
		p.mu.Lock()
		up := p.udpPeer[from.String()]
		if up == nil && !p.closed {
			if up, err = net.DialUDP("udp", nil, p.udpTo); err == nil {
				p.udpPeer[from.String()] = up
			}
		}
		p.mu.Unlock()
		if up != nil {
			up.Write(buf[:n]) // telemetry is one-way: nothing comes back
		}
	}
}

func (p *gateProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	for _, u := range p.udpPeer {
		u.Close()
	}
	p.mu.Unlock()
	p.heal()
	p.ln.Close()
	if p.udp != nil {
		p.udp.Close()
	}
}
