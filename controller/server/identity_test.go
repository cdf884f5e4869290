package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/simdaemon"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func serialOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.Text(16)
}

// The controller over reloadable files: every admin write leaves one audit
// line naming the operator's certificate, new files serve the next
// handshake while an open session goes on, and a deny-listed serial loses
// its daemon session, its admin requests on an open connection, and any
// new handshake.
func TestIdentityReloadDenyAndAudit(t *testing.T) {
	dir := pki(t, "h1", "h2")
	if _, err := auth.IssueUser(dir, "alice", auth.RoleAdmin, time.Hour); err != nil {
		t.Fatal(err)
	}
	deny := filepath.Join(dir, "deny")
	os.WriteFile(deny, nil, 0o644)
	id, err := auth.LoadIdentity(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")}, deny)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	s := start(t, func(c *Config) {
		c.Identity, c.TLS, c.AdminTLS = id, id.ServerConfig(), id.AdminServerConfig()
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	h1, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	alice := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, dir, "alice")}}
	call := func(c *http.Client, method, path, body string) (int, error) {
		req, _ := http.NewRequest(method, "https://"+s.AdminAddr()+path, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, cores := range []string{"2", "1"} {
		if code, err := call(alice, "PUT", "/v1/apps/web", `{"name":"web","cpu_cores":`+cores+`,"memory_bytes":1073741824,"sigma":0.5}`); code != 200 {
			t.Fatalf("alice's PUT: %d %v", code, err)
		}
	}
	if code, _ := call(alice, "GET", "/v1/apps", ""); code != 200 {
		t.Fatalf("GET %d", code)
	}
	aliceSerial := serialOf(t, auth.CertPath(dir, "alice"))
	audit := regexp.MustCompile(`level=INFO msg="admin write" user=alice role=admin serial=` + aliceSerial + ` method=PUT path=/v1/apps/web object=app/web status=200 before=(\S+|"[^"]*") after=("[^"]*")`)
	m := audit.FindAllStringSubmatch(logs.String(), -1)
	if len(m) != 2 || m[0][1] != "absent" || !strings.HasPrefix(m[0][2], `"cpu=2 memory=1GiB sigma=0.5`) ||
		m[1][1] != m[0][2] || !strings.HasPrefix(m[1][2], `"cpu=1 memory=1GiB`) {
		t.Fatalf("audit lines %q in\n%s", m, logs.String())
	}
	if strings.Count(logs.String(), `msg="admin write"`) != 2 {
		t.Fatalf("a read was audited:\n%s", logs.String())
	}

	// Rotation: new files for everyone but alice.
	oldH1 := serialOf(t, auth.CertPath(dir, "h1"))
	oldH1TLS := clientTLS(t, dir, "h1")
	oldCtl := serialOf(t, auth.CertPath(dir, "controller"))
	if _, err := auth.GenerateBound(dir, []string{"h1", "h2"}, []string{auth.AnyApp}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if changed, err := id.ReloadIfChanged(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	c, err := tls.Dial("tcp", s.AdminAddr(), clientTLS(t, dir, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	got := c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
	c.Close()
	if got == oldCtl || got != serialOf(t, auth.CertPath(dir, "controller")) {
		t.Fatalf("a fresh handshake sees serial %s; old %s", got, oldCtl)
	}
	if err := h1.Register(1, "web", -1, 64<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, ok := waitFor(2*time.Second, func() bool { return len(s.Snapshot().Containers) == 1 }); !ok {
		t.Fatal("h1's session opened before the rotation stopped working")
	}

	// Deny alice and h1's session's certificate.
	os.WriteFile(deny, []byte(aliceSerial+"\n"+oldH1+"\n"), 0o644)
	if err := id.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := waitFor(2*time.Second, func() bool { return len(s.Snapshot().Hosts) == 0 }); !ok {
		t.Fatalf("the denied host's session is still open: %+v", s.Snapshot().Hosts)
	}
	if code, err := call(alice, "GET", "/v1/apps", ""); code != 403 {
		t.Fatalf("alice on her open connection: %d %v; want 403", code, err)
	}
	fresh := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, dir, "alice")}}
	if code, err := call(fresh, "GET", "/v1/apps", ""); err == nil {
		t.Fatalf("alice's new connection answered %d", code)
	}
	if d, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, dir, "h1")); err != nil {
		t.Fatalf("h1 with its new certificate: %v", err)
	} else {
		d.Close()
	}
	if d, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, oldH1TLS); err == nil {
		d.Close()
		t.Fatal("h1's denied certificate opened a session")
	}
	if !strings.Contains(logs.String(), `msg="daemon session ended: its certificate is on the deny-list" host=h1`) {
		t.Errorf("no line for the ended session:\n%s", logs.String())
	}
}

// waitFor polls cond every 10 ms for up to d.
func waitFor(d time.Duration, cond func() bool) (time.Duration, bool) {
	t0 := time.Now()
	for time.Since(t0) < d {
		if cond() {
			return time.Since(t0), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return d, cond()
}
