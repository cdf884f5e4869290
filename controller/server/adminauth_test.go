package server

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// The admin API over HTTPS: anonymous callers and host certificates change
// nothing, a viewer reads, an admin does everything, a cross-origin browser
// POST is refused, pprof is off, and an operator certificate is no host's.
func TestAdminAPIRoles(t *testing.T) {
	dir := pki(t, "h1")
	sc, ac := controllerTLS(t, dir)
	s := start(t, func(c *Config) { c.TLS, c.AdminTLS, c.MetricsAddr = sc, ac, "127.0.0.1:0" })
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	base := "https://" + s.AdminAddr()
	// A client that trusts the CA and shows the given certificate ("": none).
	client := func(name string) *http.Client {
		tc := &tls.Config{ServerName: auth.ControllerName}
		if name != "" {
			tc = clientTLS(t, dir, name)
		} else {
			anon := clientTLS(t, dir, "h1")
			anon.Certificates = nil
			tc = anon
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	call := func(c *http.Client, method, path, body string, hdr map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	put := `{"name":"web","cpu_cores":1,"memory_bytes":1073741824,"sigma":0.5}`
	cases := []struct {
		who, method, path, body string
		want                    int
	}{
		{"", "DELETE", "/v1/apps/web", "", 401},
		{"", "GET", "/v1/apps", "", 401},
		{"", "GET", "/metrics", "", 401},
		{"h1", "PUT", "/v1/apps/web", put, 403},
		{"h1", "DELETE", "/v1/apps/web", "", 403},
		{"h1", "GET", "/v1/apps", "", 403},
		{"viewer", "GET", "/v1/apps", "", 200},
		{"viewer", "GET", "/v1/containers", "", 200},
		{"viewer", "GET", "/v1/hosts", "", 200},
		{"viewer", "GET", "/metrics", "", 200},
		{"viewer", "PUT", "/v1/apps/web", put, 403},
		{"viewer", "DELETE", "/v1/apps/web", "", 403},
		{"viewer", "POST", "/v1/stats/reset", "", 403},
		// The scaler (escra-gateway's certificate) reads and adds or
		// removes containers of an app that exists (the handler answers:
		// 400 for the bad body, 404 for the unknown app), nothing else.
		{"scaler", "GET", "/v1/apps", "", 200},
		{"scaler", "GET", "/v1/containers", "", 200},
		{"scaler", "GET", "/v1/hosts", "", 200},
		{"scaler", "GET", "/metrics", "", 200},
		{"scaler", "GET", "/debug/pprof/", "", 403},
		{"scaler", "POST", "/v1/apps/web/containers", "{", 400},
		{"scaler", "POST", "/v1/apps/nope/containers", `{"containers":[]}`, 404},
		{"scaler", "DELETE", "/v1/apps/nope/containers/c1", "", 404},
		{"scaler", "DELETE", "/v1/apps/web", "", 403},
		{"scaler", "PUT", "/v1/apps/web", put, 403},
		{"scaler", "POST", "/v1/apps/web/deploy", `{"containers":[]}`, 403},
		{"scaler", "POST", "/v1/stats/reset", "", 403},
		{"scaler", "DELETE", "/v1/apps/web/containers", "", 403},
		{"scaler", "POST", "/v1/apps/web/containers/c1", "", 403},
		{"viewer", "POST", "/v1/apps/web/containers", "{", 403},
		{"viewer", "DELETE", "/v1/apps/web/containers/c1", "", 403},
		{"h1", "POST", "/v1/apps/web/containers", "{", 403},
		{"admin", "GET", "/debug/pprof/", "", 404},
		{"admin", "PUT", "/v1/apps/web", put, 200},
	}
	for _, c := range cases {
		if got := call(client(c.who), c.method, c.path, c.body, nil); got != c.want {
			t.Errorf("%q %s %s: %d, want %d", c.who, c.method, c.path, got, c.want)
		}
	}
	if a := s.Snapshot().Apps; len(a) != 1 || a[0].CPUCores != 1 {
		t.Fatalf("apps after the calls: %+v (only the admin's PUT may have changed web)", a)
	}
	// A browser on another site posting with the admin's certificate.
	if got := call(client("admin"), "DELETE", "/v1/apps/web", "", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); got != 403 {
		t.Errorf("cross-origin DELETE: %d, want 403", got)
	}
	if got := call(client("admin"), "PUT", "/v1/apps/web", put, map[string]string{"Origin": "https://evil.example"}); got != 403 {
		t.Errorf("cross-origin PUT (Origin only): %d, want 403", got)
	}
	if len(s.Snapshot().Apps) != 1 {
		t.Fatal("a cross-origin request deleted the app")
	}
	// Without a CA-signed certificate there is no TLS session at all for
	// a client of another CA.
	other := pki(t, "h1")
	if code := func() int {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, other, "admin")}}
		resp, err := c.Get(base + "/v1/apps")
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}(); code == 200 {
		t.Fatal("a foreign CA's admin certificate read the apps")
	}
	// The adminclient with admin.pem, and the plain /metrics listener.
	tc, err := adminclient.OperatorTLS(dir, auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := adminclient.NewTLS(s.AdminAddr(), tc)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.DeleteApp(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.MetricsAddr() + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("plain /metrics listener: %v %v", resp, err)
	}
	// Under mutual TLS the controller says when its certificate expires.
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), `escra_tls_certificate_expiry_timestamp_seconds{cn="escra-controller",role="leaf"}`) {
		t.Error("no certificate expiry on /metrics")
	}
	resp.Body.Close()
	if resp, err := http.Get("http://" + s.MetricsAddr() + "/v1/apps"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("the metrics listener serves the admin API")
		}
	}
	// The admin's certificate cannot open a daemon session as host "admin".
	if d, err := simdaemon.DialTLS(s.TCPAddr(), "admin", 4, 8<<30, clientTLS(t, dir, "admin")); err == nil {
		d.Close()
		t.Fatal("an operator certificate opened a daemon session")
	}
}

// A browser form POST from another site, in both modes: in --insecure
// mode the admin API is plain HTTP on loopback, which any page the
// operator opens can reach, so the origin check is all that stands there.
// The same POST without browser headers reaches the handler (400 for the
// form body), so the 403 is the origin check, not the route or the role.
func TestCrossOriginFormPOSTRefused(t *testing.T) {
	dir := pki(t, "h1")
	_, ac := controllerTLS(t, dir)
	for _, mode := range []struct {
		name   string
		scheme string
		tls    *tls.Config // the admin API's
		client *http.Client
	}{
		{"insecure", "http://", nil, http.DefaultClient},
		{"tls", "https://", ac, &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, dir, "admin")}}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			s := start(t, func(c *Config) { c.AdminTLS = mode.tls })
			if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 1, MemoryBytes: 1 << 30}); err != nil {
				t.Fatal(err)
			}
			post := func(hdr map[string]string) int {
				t.Helper()
				req, _ := http.NewRequest("POST", mode.scheme+s.AdminAddr()+"/v1/apps/web/deploy", strings.NewReader("replicas=9"))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				resp, err := mode.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			for _, hdr := range []map[string]string{
				{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
				{"Sec-Fetch-Site": "cross-site"},
				{"Origin": "https://evil.example"},
			} {
				if got := post(hdr); got != http.StatusForbidden {
					t.Errorf("cross-origin form POST %v: %d, want 403", hdr, got)
				}
			}
			if got := post(nil); got != http.StatusBadRequest {
				t.Errorf("same POST from a non-browser client: %d, want 400 (the handler refusing the form body)", got)
			}
		})
	}
}

// pprof exists only with --pprof, and then only for admins.
func TestPprofOnlyWhenAskedAndOnlyAdmins(t *testing.T) {
	dir := pki(t, "h1")
	_, ac := controllerTLS(t, dir)
	get := func(s *Server, who string) int {
		t.Helper()
		tc := clientTLS(t, dir, "h1")
		tc.Certificates = nil
		if who != "" {
			tc = clientTLS(t, dir, who)
		}
		resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: tc}}).Get("https://" + s.AdminAddr() + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	off := start(t, func(c *Config) { c.AdminTLS = ac })
	if got := get(off, "admin"); got != http.StatusNotFound {
		t.Errorf("pprof without --pprof, admin: %d, want 404", got)
	}
	on := start(t, func(c *Config) { c.AdminTLS, c.Pprof = ac, true })
	for who, want := range map[string]int{"admin": 200, "viewer": 403, "h1": 403, "": 401} {
		if got := get(on, who); got != want {
			t.Errorf("pprof with --pprof, %q: %d, want %d", who, got, want)
		}
	}
}
