package main

import (
	"io"
	"net"
	"sync"
)

// gateProxy relays a unix socket (escrad's path to its Docker engine in
// make soak FAULTS=1) and can hang it or make it gone: cut holds every
// byte (not read from the socket; nothing is lost, both ends just hear
// nothing), heal lets it flow, setDown closes connections and refuses new
// ones (an engine that is gone rather than hung). Partitions between
// escrad and the controller are not made here: nft DROP rules in escrad's
// own network namespace (internal/netns).
type gateProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	open   chan struct{} // closed while traffic flows
	conns  map[net.Conn]bool
	closed bool
	down   bool // refusing: as a dead server, connections are closed at once
}

// newUnixProxy listens on the unix socket at and relays to target.
func newUnixProxy(at, target string) (*gateProxy, error) {
	ln, err := net.Listen("unix", at)
	if err != nil {
		return nil, err
	}
	p := &gateProxy{ln: ln, open: make(chan struct{}), conns: map[net.Conn]bool{}, target: target}
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
	<-p.gate() // a connection made while hung waits
	up, err := net.Dial("unix", p.target)
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
			if c, ok := dst.(*net.UnixConn); ok {
				c.CloseWrite()
			}
			return
		}
		<-p.gate() // stop reading while hung: the sender's buffers fill
	}
}

func (p *gateProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.heal()
	p.ln.Close()
}
