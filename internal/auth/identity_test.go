package auth

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// echo serves cfg on loopback: each connection echoes lines back.
func echo(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(l))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip dials addr and exchanges one line; the server's verdict on
// the client's certificate (TLS 1.3: after the client's handshake) shows
// in the read.
func roundTrip(addr string, cc *tls.Config) (*tls.Conn, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cc)
	if err != nil {
		return nil, err
	}
	if err := ping(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func ping(c *tls.Conn) error {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	l, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if l != "ping\n" {
		return fmt.Errorf("echo %q", l)
	}
	return nil
}

func hostClient(t *testing.T, dir, h string) *tls.Config {
	t.Helper()
	cc, err := ClientConfig(Files{CA: CAPath(dir), Cert: CertPath(dir, h), Key: KeyPath(dir, h)}, "")
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func controllerFiles(dir string) Files {
	return Files{CA: CAPath(dir), Cert: CertPath(dir, "controller"), Key: KeyPath(dir, "controller")}
}

// New files under a running listener: the next handshake presents the
// new certificate (another serial), an open connection goes on with the
// old one, and the exported expiry follows.
func TestIdentityRotatesWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(dir, []string{"h1"}, nil, 30*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	id, err := LoadIdentity(controllerFiles(dir), "")
	if err != nil {
		t.Fatal(err)
	}
	addr := echo(t, id.ServerConfig())
	old, err := roundTrip(addr, hostClient(t, dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	s1 := old.ConnectionState().PeerCertificates[0].SerialNumber
	if changed, err := id.ReloadIfChanged(); changed || err != nil {
		t.Fatalf("unchanged files reloaded: %v %v", changed, err)
	}
	if _, err := Generate(dir, []string{"h1"}, nil, 10*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if changed, err := id.ReloadIfChanged(); !changed || err != nil {
		t.Fatalf("new files: changed %v, %v", changed, err)
	}
	fresh, err := roundTrip(addr, hostClient(t, dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	s2 := fresh.ConnectionState().PeerCertificates[0].SerialNumber
	if s1.Cmp(s2) == 0 {
		t.Fatalf("a fresh handshake still sees serial %x", s1)
	}
	if id.Leaf().SerialNumber.Cmp(s2) != 0 {
		t.Fatalf("Leaf %x, handshake %x", id.Leaf().SerialNumber, s2)
	}
	if err := ping(old); err != nil {
		t.Fatalf("the connection open before the reload broke: %v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(id.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			k := mf.GetName()
			for _, l := range m.Label {
				k += "," + l.GetName() + "=" + l.GetValue()
			}
			got[k] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	leafKey := "escra_tls_certificate_expiry_timestamp_seconds,cn=escra-controller,role=leaf"
	if got[leafKey] != float64(id.Leaf().NotAfter.Unix()) || time.Until(id.Leaf().NotAfter) > 11*24*time.Hour {
		t.Errorf("leaf expiry %v, want the 10-day certificate's %v", got[leafKey], id.Leaf().NotAfter.Unix())
	}
	if ca := got["escra_tls_certificate_expiry_timestamp_seconds,cn=escra CA,role=ca"]; time.Until(time.Unix(int64(ca), 0)) < 9*365*24*time.Hour {
		t.Errorf("CA expiry %v: want about 10 years", ca)
	}
	if got["escra_tls_reloads_total,result=ok"] != 2 {
		t.Errorf("reloads %v", got)
	}
}

// A serial on the deny-list is refused at the handshake, others pass; a
// deny-list that does not parse keeps the previous files and list.
func TestIdentityDenyList(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(dir, []string{"h1", "h2"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	deny := filepath.Join(dir, "deny")
	if err := os.WriteFile(deny, []byte("# none yet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := LoadIdentity(controllerFiles(dir), deny)
	if err != nil {
		t.Fatal(err)
	}
	addr := echo(t, id.ServerConfig())
	open, err := roundTrip(addr, hostClient(t, dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	h1, err := readCert(CertPath(dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	// openssl's form: upper case, colons between bytes.
	hex := strings.ToUpper(h1.SerialNumber.Text(16))
	var colons []string
	for i := len(hex); i > 0; i -= 2 {
		colons = append([]string{hex[max(0, i-2):i]}, colons...)
	}
	if err := os.WriteFile(deny, []byte("serial="+strings.Join(colons, ":")+"  # h1's key was lost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := id.Reload(); err != nil {
		t.Fatal(err)
	}
	if id.Denied([]*x509.Certificate{h1}) != h1.SerialNumber.Text(16) {
		t.Fatal("h1 not denied after the reload")
	}
	if c, err := roundTrip(addr, hostClient(t, dir, "h1")); err == nil {
		c.Close()
		t.Fatal("a denied certificate completed a round trip")
	}
	if c, err := roundTrip(addr, hostClient(t, dir, "h2")); err != nil {
		t.Fatalf("h2 refused: %v", err)
	} else {
		c.Close()
	}
	// Refused at the handshake only: the open session is the controller's
	// to end (OnReload).
	if err := ping(open); err != nil {
		t.Fatalf("open connection: %v", err)
	}
	if err := os.WriteFile(deny, []byte("not-a-serial\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := id.Reload(); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad deny-list: %v", err)
	}
	if c, err := roundTrip(addr, hostClient(t, dir, "h1")); err == nil {
		c.Close()
		t.Fatal("a failed reload dropped the deny-list")
	}
	if _, err := LoadIdentity(controllerFiles(dir), deny); err == nil {
		t.Fatal("a start with a bad deny-list succeeded")
	}
}

// A daemon's Identity verifies the controller against the CA loaded last:
// another CA's controller is refused until that CA's file is loaded, and
// a certificate for another name is refused.
func TestIdentityClientFollowsCA(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if _, err := Generate(d, []string{"h1"}, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	sa, err := ServerConfig(controllerFiles(a))
	if err != nil {
		t.Fatal(err)
	}
	addrA := echo(t, sa)
	// h1 of CA b, trusting a's CA: both sides agree.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	caA, _ := os.ReadFile(CAPath(a))
	caB, _ := os.ReadFile(CAPath(b))
	os.WriteFile(ca, caB, 0o644)
	id, err := LoadIdentity(Files{CA: ca, Cert: CertPath(a, "h1"), Key: KeyPath(a, "h1")}, "")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := roundTrip(addrA, id.ClientConfig("")); err == nil {
		c.Close()
		t.Fatal("a controller of another CA accepted")
	}
	os.WriteFile(ca, append(caB, caA...), 0o644) // both, as while rotating a CA
	if err := id.Reload(); err != nil {
		t.Fatal(err)
	}
	c, err := roundTrip(addrA, id.ClientConfig(""))
	if err != nil {
		t.Fatalf("after the CA reload: %v", err)
	}
	c.Close()
	if c, err := roundTrip(addrA, id.ClientConfig("other-controller")); err == nil {
		c.Close()
		t.Fatal("a certificate for another name accepted")
	}
	// A host certificate (client auth only) cannot serve as the controller.
	hs, err := ServerConfig(Files{CA: CAPath(a), Cert: CertPath(a, "h1"), Key: KeyPath(a, "h1")})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := roundTrip(echo(t, hs), id.ClientConfig("h1")); err == nil {
		c.Close()
		t.Fatal("a host certificate served as the controller")
	}
}

func TestParseDenyList(t *testing.T) {
	d, err := parseDenyList("f", []byte("0a:FF\n\n  # c\n00abc # x\nserial=1F\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"aff", "abc", "1f"} {
		if !d[k] {
			t.Errorf("%s missing from %v", k, d)
		}
	}
	for _, bad := range []string{"xyz", "-1", "12 34"} {
		if _, err := parseDenyList("f", []byte("ab\n"+bad+"\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
