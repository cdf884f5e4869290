package main

import (
	"strings"
	"testing"
)

// Without certificates and without --insecure the controller refuses to
// start, with one line that says what to do.
func TestRefusesToStartWithoutCertificates(t *testing.T) {
	var stderr strings.Builder
	code := run([]string{"--tls-ca", "/nonexistent/ca.pem", "--listen", "127.0.0.1:0", "--telemetry-listen", "127.0.0.1:0",
		"--admin-listen", ""}, &stderr)
	if code != 2 || strings.Count(stderr.String(), "\n") != 1 ||
		!strings.Contains(stderr.String(), "escractl certs") || !strings.Contains(stderr.String(), "--insecure") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
