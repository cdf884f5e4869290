package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/escra-dev/escra/internal/auth"
)

// --- F: identities: new files without a restart, the audit names who ---
//
// A controller (TLS, --tls-reload-every 0: SIGHUP only, so the signal is
// what is measured) and one escrad (--no-docker: its session is what
// counts) run from escractl certs' files, with an operator alice issued by
// escractl certs --user. The files are issued again (new serials, same CA)
// and the controller is sent SIGHUP: a fresh handshake must see the new
// serial with the same pid, while an HTTP connection and escrad's session
// opened before go on. escractl with alice's certificate writes an app:
// the controller's log must have an audit line naming alice. alice's
// serial is then put on the --tls-deny list (SIGHUP): her next call fails.

func rotateSection() error {
	certs := filepath.Join(tmp, "rotate-certs")
	ctl := filepath.Join(*bin, "escractl")
	for _, a := range [][]string{{"--hosts", "h1", "--apps", "*"}, {"--user", "alice", "--role", "admin"}} {
		if b, err := runOut(ctl, append([]string{"certs", "--dir", certs}, a...)...); err != nil {
			return fmt.Errorf("escractl certs: %v: %s", err, b)
		}
	}
	deny := filepath.Join(tmp, "rotate-deny")
	if err := os.WriteFile(deny, []byte("# serials refused by the controller\n"), 0o644); err != nil {
		return err
	}
	c, err := startController("rotate-controller", "--tls-ca", auth.CAPath(certs), "--tls-cert", auth.CertPath(certs, "controller"),
		"--tls-key", auth.KeyPath(certs, "controller"), "--tls-deny", deny, "--tls-reload-every", "0", "--state-dir", filepath.Join(tmp, "rotate-state"))
	if err != nil {
		return err
	}
	pid := c.p.cmd.Process.Pid
	admin, err := client(certs, "admin")
	if err != nil {
		return err
	}
	dir := filepath.Join(tmp, "rotate-h1")
	os.MkdirAll(dir, 0o700)
	ed, err := start("rotate-escrad-h1", "", filepath.Join(*bin, "escrad"), "--no-docker", "--controller", c.sessions, "--host-id", "h1",
		"--backend", "cgroupfs", "--tls-ca", auth.CAPath(certs), "--tls-cert", auth.CertPath(certs, "h1"), "--tls-key", auth.KeyPath(certs, "h1"),
		"--oom-state", filepath.Join(dir, "oom-armed"), "--lock-dir", dir, "--no-oom-guard")
	if err != nil {
		return err
	}
	h1Session := func() uint32 {
		st, _ := stateTLS(admin, c.admn)
		for _, h := range st.Hosts {
			if h.HostID == "h1" {
				return h.SessionID
			}
		}
		return 0
	}
	if _, ok := until(15*time.Second, func() bool { return h1Session() != 0 }); !ok {
		return fmt.Errorf("escrad h1 never opened a session: %s", ed.tail())
	}
	sess0 := h1Session()
	serial0, err := servedSerial(certs, c.admn)
	if err != nil {
		return err
	}
	// An HTTP connection opened before the new files.
	var reused bool
	trace := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	get := func() int {
		req, _ := http.NewRequestWithContext(trace, "GET", "https://"+c.admn+"/v1/apps", nil)
		resp, err := admin.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body) // read to the end: the connection stays open
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != 200 {
		return fmt.Errorf("GET /v1/apps: %d", code)
	}

	if b, err := runOut(ctl, "certs", "--dir", certs, "--hosts", "h1", "--apps", "*"); err != nil {
		return fmt.Errorf("escractl certs (new files): %v: %s", err, b)
	}
	want, err := fileSerial(auth.CertPath(certs, "controller"))
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := c.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return err
	}
	var serial1 string
	took, rotated := until(5*time.Second, func() bool { serial1, _ = servedSerial(certs, c.admn); return serial1 == want })
	alive := syscall.Kill(pid, 0) == nil && !zombie(pid)
	kept := get() == 200 && reused
	// escrad takes its new files for its next connection.
	ed.cmd.Process.Signal(syscall.SIGHUP)
	_, edReloaded := until(3*time.Second, func() bool { return strings.Contains(logOf(ed), `msg="TLS files reloaded" cause=SIGHUP`) })
	sess1 := h1Session()
	summary["cert_rotated_without_restart"] = b2i(rotated && serial1 != serial0 && alive)
	summary["rotate_reload_ms"] = took.Milliseconds()
	summary["open_connection_kept"] = b2i(kept)
	summary["daemon_session_kept"] = b2i(sess1 == sess0)
	summary["escrad_reloaded"] = b2i(edReloaded && syscall.Kill(ed.cmd.Process.Pid, 0) == nil)
	say("rotate: controller pid %d alive %v; serial %s → %s (file %s) %v after SIGHUP (%v since the signal); a connection opened before answered 200 (reused %v); escrad h1 session %d → %d, escrad reloaded on SIGHUP %v",
		pid, alive, serial0, serial1, want, took.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), kept, sess0, sess1, edReloaded)

	// The expiry gauge follows the files.
	exp := metricOf(admin, "https://"+c.admn+"/metrics", `escra_tls_certificate_expiry_timestamp_seconds{cn="escra-controller",role="leaf"}`)
	leaf, _ := readLeaf(auth.CertPath(certs, "controller"))
	summary["expiry_metric_follows"] = b2i(leaf != nil && exp == float64(leaf.NotAfter.Unix()))
	summary["cert_days_left"] = round(time.Until(time.Unix(int64(exp), 0)).Hours() / 24)

	// alice writes with escractl: the audit line names her.
	alice := []string{"--controller", "https://" + c.admn, "--certs", certs, "--tls-cert", auth.CertPath(certs, "alice"), "--tls-key", auth.KeyPath(certs, "alice")}
	if b, err := runOut(ctl, append(alice, "apply", "-f", "docs/examples/batch.yaml", "--budget-only")...); err != nil {
		return fmt.Errorf("escractl apply as alice: %v: %s", err, b)
	}
	aliceSerial, err := fileSerial(auth.CertPath(certs, "alice"))
	if err != nil {
		return err
	}
	line := regexp.MustCompile(`msg="admin write" user=alice role=admin serial=` + aliceSerial + ` method=PUT path=/v1/apps/batch\S* object=app/batch status=200 .*`)
	var audit string
	until(2*time.Second, func() bool { audit = line.FindString(logOf(c.p)); return audit != "" })
	summary["audit_names_user"] = b2i(audit != "")
	say("audit: %s", strings.TrimSpace(audit))

	// Deny alice: her next call fails; the admin's goes on.
	if err := os.WriteFile(deny, []byte(aliceSerial+" # alice's laptop was lost\n"), 0o644); err != nil {
		return err
	}
	c.p.cmd.Process.Signal(syscall.SIGHUP)
	var refused bool
	until(3*time.Second, func() bool {
		_, err := runOut(ctl, append(alice, "get", "apps")...)
		refused = err != nil
		return refused
	})
	b, _ := runOut(ctl, append(alice, "get", "apps")...)
	summary["denied_cert_refused"] = b2i(refused && get() == 200)
	say("deny-list: alice's serial %s listed; her escractl get apps: %s", aliceSerial, strings.TrimSpace(string(b)))
	if !rotated {
		return errors.New("the controller never served the new certificate: " + c.p.tail())
	}
	ed.kill()
	return nil
}

// servedSerial is the serial of the certificate a fresh handshake with the
// admin API sees.
func servedSerial(certs, addr string) (string, error) {
	pair, err := tls.LoadX509KeyPair(auth.CertPath(certs, "admin"), auth.KeyPath(certs, "admin"))
	if err != nil {
		return "", err
	}
	ca, err := readLeaf(auth.CAPath(certs))
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	conn, err := tls.Dial("tcp", addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: auth.ControllerName, Certificates: []tls.Certificate{pair}})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

func fileSerial(path string) (string, error) {
	c, err := readLeaf(path)
	if err != nil {
		return "", err
	}
	return c.SerialNumber.Text(16), nil
}

func readLeaf(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM", path)
	}
	return x509.ParseCertificate(blk.Bytes)
}

func logOf(p *proc) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}
