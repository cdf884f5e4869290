package auth

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The exported expiry is the NotAfter of the certificate the config
// presents, in Unix seconds, labelled with its common name and role leaf.
func TestExpiryCollector(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(dir, []string{"node1"}, nil, 30*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	tc, err := ClientConfig(Files{CA: CAPath(dir), Cert: CertPath(dir, "node1"), Key: KeyPath(dir, "node1")}, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(CertPath(dir, "node1"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ExpiryCollector(tc))
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].Metric) != 1 {
		t.Fatalf("gathered %v, %v", mfs, err)
	}
	m := mfs[0].Metric[0]
	if got := m.GetGauge().GetValue(); got != float64(cert.NotAfter.Unix()) {
		t.Errorf("expiry %v, want %v", got, cert.NotAfter.Unix())
	}
	if left := time.Until(time.Unix(int64(m.GetGauge().GetValue()), 0)); left < 29*24*time.Hour || left > 31*24*time.Hour {
		t.Errorf("expires in %v, want about 30 days", left)
	}
	if l := m.GetLabel(); len(l) != 2 || l[0].GetValue() != "node1" || l[1].GetValue() != "leaf" {
		t.Errorf("labels %v, want cn=node1, role=leaf", l)
	}
	if mfs[0].GetName() != "escra_tls_certificate_expiry_timestamp_seconds" {
		t.Errorf("name %s", mfs[0].GetName())
	}
}
