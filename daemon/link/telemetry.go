package link

import (
	"fmt"
	"net"

	"github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// udpSession is the telemetry datagram socket of one TCP session.
type udpSession struct {
	id   uint32
	conn *net.UDPConn
	mac  *wire.DatagramMAC // authenticated mode; used by the sampler only
}

func dialTelemetry(addr string, tcpPeer net.Addr) (*udpSession, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("bad telemetry address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if ta, ok := tcpPeer.(*net.TCPAddr); ok {
			host = ta.IP.String()
		}
	}
	ua, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, err
	}
	uc, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		return nil, err
	}
	return &udpSession{conn: uc}, nil
}

// CPU queues one telemetry record (copied; s is reused by the caller).
// Only the sampler goroutine calls CPU and Flush.
func (c *Client) CPU(s *escrapb.CpuStat) {
	us := c.udp.Load()
	if us == nil {
		return // no session: telemetry is dropped, nothing else changes
	}
	if us != c.sess {
		c.sess = us
		c.batcher = wire.Batcher{SessionID: us.id, PeriodUs: c.batcher.PeriodUs, MAC: us.mac}
		c.used = 0
	}
	if c.used == len(c.pool) {
		c.pool = append(c.pool, &escrapb.CpuStat{})
	}
	d := c.pool[c.used]
	c.used++
	d.Handle, d.PeriodSeq, d.QuotaUs, d.PeriodUs = s.Handle, s.PeriodSeq, s.QuotaUs, s.PeriodUs
	d.UnusedUs, d.Throttled, d.NrThrottled = s.UnusedUs, s.Throttled, s.NrThrottled
	d.ThrottledUs, d.UsageUs, d.MidPeriod = s.ThrottledUs, s.UsageUs, s.MidPeriod
	_ = c.batcher.Add(d, c.emit)
}

// Flush sends the period's last datagram.
func (c *Client) Flush() {
	if c.sess != nil {
		_ = c.batcher.Flush(c.emit)
	}
	c.used = 0
}

func (c *Client) emit(b []byte) error {
	if c.sess == nil {
		return errDown
	}
	_, err := c.sess.conn.Write(b)
	if err == nil {
		c.Datagrams.Add(1)
	}
	return nil // a lost datagram is a gap in period_seq, by design
}

// SetPeriod sets the default period stamped on telemetry batches.
func (c *Client) SetPeriod(periodUs uint32) { c.batcher.PeriodUs = periodUs }
