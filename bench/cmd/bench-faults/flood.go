package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/internal/auth"
)

// --- F: a telemetry flood from another source ------------------------------
//
// One controller (mutual TLS) and one real escrad (h1, a container
// spinning one thread) sending telemetry from 127.0.0.1. Two sockets bound
// to 127.0.0.2 send the controller's telemetry port 1,200-byte garbage
// datagrams as fast as they can for floodFor (and at most floodMax). The
// legitimate loss is what escrad sent (escrad_telemetry_datagrams_total)
// less what the controller took for its session (/v1/hosts
// telemetry_datagrams) over the flood and a second after it; the same
// difference over a quiet window before is the baseline. The controller
// gives h1's session a socket of its own (flood_legit_on_own_socket: what
// came in there), so the flood overflows only the shared socket's buffer.

const (
	floodFor = 20 * time.Second
	floodMax = 20_000_000
	floodApp = "flt-flood"
)

func floodSection() error {
	certs := filepath.Join(tmp, "flood-certs")
	if b, err := runOut(filepath.Join(*bin, "escractl"), "certs", "--dir", certs, "--hosts", "h1", "--apps", floodApp); err != nil {
		return fmt.Errorf("escractl certs: %v: %s", err, b)
	}
	c, err := startController("flood-controller", "--tls-ca", auth.CAPath(certs), "--tls-cert", auth.CertPath(certs, "controller"),
		"--tls-key", auth.KeyPath(certs, "controller"), "--state-dir", filepath.Join(tmp, "flood-state"))
	if err != nil {
		return err
	}
	admin, err := client(certs, "admin")
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`{"name":%q,"cpu_cores":1,"memory_bytes":%d,"sigma":0}`, floodApp, 256<<20)
	if code, out := call(admin, "PUT", "https://"+c.admn+"/v1/apps/"+floodApp, body); code != 200 {
		return fmt.Errorf("PUT %s: %d %s", floodApp, code, out)
	}
	if _, err := runContainerCmd(engines[0], "flood", floodApp, 256<<20, 100000, "-threads", "1"); err != nil {
		return err
	}
	dir := filepath.Join(tmp, "flood-h1")
	os.MkdirAll(dir, 0o700)
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort())
	ed, err := start("flood-escrad-h1", "", filepath.Join(*bin, "escrad"), "--docker-host", engines[0].host,
		"--metrics-listen", metrics, "--controller", c.sessions, "--host-id", "h1", "--backend", "cgroupfs",
		"--tls-ca", auth.CAPath(certs), "--tls-cert", auth.CertPath(certs, "h1"), "--tls-key", auth.KeyPath(certs, "h1"),
		"--oom-state", filepath.Join(dir, "oom-armed"), "--lock-dir", dir)
	if err != nil {
		return err
	}
	if _, ok := until(30*time.Second, func() bool { st, ok := stateTLS(admin, c.admn); return ok && len(st.Containers) == 1 }); !ok {
		return fmt.Errorf("escrad h1 never registered its container: %s", ed.tail())
	}
	// sent, taken, sent again: a pair counts only when no datagram left
	// between the reads (escrad sends about ten a second), and taken is read
	// once the controller had time to route what was sent before.
	pair := func() (sent, taken float64, err error) {
		for range 50 {
			sent = metricOf(nil, "http://"+metrics+"/metrics", "escrad_telemetry_datagrams_total")
			time.Sleep(5 * time.Millisecond)
			st, ok := stateTLS(admin, c.admn)
			if !ok || len(st.Hosts) != 1 {
				return 0, 0, fmt.Errorf("hosts: %+v", st.Hosts)
			}
			taken = float64(st.Hosts[0].TelemetryDatagrams)
			if sent == metricOf(nil, "http://"+metrics+"/metrics", "escrad_telemetry_datagrams_total") {
				return sent, taken, nil
			}
		}
		return 0, 0, errors.New("escrad's telemetry count never held still for a read")
	}
	time.Sleep(2 * time.Second)
	s0, t0, err := pair()
	if err != nil {
		return err
	}
	time.Sleep(5 * time.Second)
	s1, t1, err := pair()
	if err != nil {
		return err
	}
	dropped0, rcvbuf0 := droppedOf(admin, c.admn), udpRcvbufErrors()
	// What came in on h1's own socket (controller/ingest/pinned.go).
	pinnedOf := func() float64 {
		return metricOf(admin, "https://"+c.admn+"/metrics", "escra_telemetry_pinned_datagrams_total")
	}
	pinned0 := pinnedOf()

	to, err := net.ResolveUDPAddr("udp", c.udp)
	if err != nil {
		return err
	}
	var flooded atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(floodFor)
	var ferr error
	var emu sync.Mutex
	for range 2 {
		conn, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")}, to)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			junk := make([]byte, 1200)
			rand.Read(junk)
			for time.Now().Before(end) && flooded.Load() < floodMax {
				for range 256 {
					if _, err := conn.Write(junk); err != nil && !errors.Is(err, net.ErrClosed) {
						// ECONNREFUSED from an ICMP of an earlier datagram: go on.
						emu.Lock()
						ferr = err
						emu.Unlock()
						continue
					}
					flooded.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second) // what escrad sent at the end is taken or lost by now
	s2, t2, err := pair()
	if err != nil {
		return err
	}
	dropped, rcvbuf := droppedOf(admin, c.admn), udpRcvbufErrors()
	summary["flood_legit_on_own_socket"] = pinnedOf() - pinned0
	summary["flood_session_sockets"] = metricOf(admin, "https://"+c.admn+"/metrics", "escra_telemetry_session_sockets")
	sent, taken := s2-s1, t2-t1
	if sent <= 0 {
		return fmt.Errorf("escrad sent no telemetry during the flood: %s", ed.tail())
	}
	loss := 100 * (sent - taken) / sent
	base := 0.0
	if s1 > s0 {
		base = 100 * ((s1 - s0) - (t1 - t0)) / (s1 - s0)
	}
	n := flooded.Load()
	summary["flood_legit_telemetry_loss_pct"] = round(loss)
	summary["flood_legit_sent"] = sent
	summary["flood_legit_taken"] = taken
	summary["flood_baseline_loss_pct"] = round(base)
	summary["flood_datagrams"] = n
	summary["flood_datagrams_per_s"] = round(float64(n) / floodFor.Seconds())
	summary["flood_rate_limited"] = dropped["rate_limited"] - dropped0["rate_limited"]
	summary["flood_forged"] = dropped["forged"] - dropped0["forged"]
	summary["flood_kernel_rcvbuf_errors"] = rcvbuf - rcvbuf0
	say("flood: %d datagrams from 127.0.0.2 in %v (%.0f/s; %d rate-limited, %d dropped as forged, %d dropped by the kernel, machine-wide: UDP RcvbufErrors); escrad h1 sent %.0f, the controller took %.0f: %.2f %% lost (%.2f %% in the quiet %v before; last send error: %v)",
		n, floodFor, float64(n)/floodFor.Seconds(), summary["flood_rate_limited"], summary["flood_forged"], rcvbuf-rcvbuf0, sent, taken, loss, base, 5*time.Second, ferr)
	return nil
}

// udpRcvbufErrors is the kernel's count of UDP datagrams dropped for a
// full receive buffer (/proc/net/snmp), machine-wide.
func udpRcvbufErrors() int64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var head []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		for i := range min(len(head), len(f)) {
			if head[i] == "RcvbufErrors" {
				n, _ := strconv.ParseInt(f[i], 10, 64)
				return n
			}
		}
	}
	return 0
}

// droppedOf is the controller's dropped input by reason (/v1/stats).
func droppedOf(c *http.Client, admin string) map[string]uint64 {
	var st adminapi.Stats
	if code, b := call(c, "GET", "https://"+admin+"/v1/stats", ""); code == 200 {
		json.Unmarshal(b, &st)
	}
	return st.Dropped
}
