package auth

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	expiryDesc = prometheus.NewDesc("escra_tls_certificate_expiry_timestamp_seconds",
		"When a certificate of this process expires (NotAfter, Unix seconds): role leaf is the one it presents, ca each CA it verifies peers against; escractl certs --days sets the leaf's.",
		[]string{"role", "cn"}, nil)
	reloadDesc = prometheus.NewDesc("escra_tls_reloads_total",
		"Loads of the TLS files (certificate, key, CA, deny-list) by result: ok, or error (the previous files stay in use).",
		[]string{"result"}, nil)
)

// ExpiryCollector exports the NotAfter of the certificate tc presents, so
// an alert can fire before mutual TLS stops working. For a fixed
// configuration (tests); a process reloading its files exports
// Identity.Collector.
func ExpiryCollector(tc *tls.Config) prometheus.Collector { return expiry{tc: tc} }

// Collector exports the NotAfter of the certificate and CAs loaded last,
// and the reloads by result.
func (id *Identity) Collector() prometheus.Collector { return expiry{id: id} }

type expiry struct {
	tc *tls.Config
	id *Identity
}

func (e expiry) Describe(ch chan<- *prometheus.Desc) {
	ch <- expiryDesc
	if e.id != nil {
		ch <- reloadDesc
	}
}

func (e expiry) Collect(ch chan<- prometheus.Metric) {
	send := func(role string, c *x509.Certificate) {
		ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(c.NotAfter.Unix()), role, c.Subject.CommonName)
	}
	if e.id != nil {
		send("leaf", e.id.Leaf())
		// A bundle of CAs (old and new while the CA is rotated) may repeat
		// a name: the one expiring first is what an alert is for.
		first := map[string]*x509.Certificate{}
		var names []string
		for _, c := range e.id.CAs() {
			n := c.Subject.CommonName
			if f, ok := first[n]; !ok || c.NotAfter.Before(f.NotAfter) {
				if !ok {
					names = append(names, n)
				}
				first[n] = c
			}
		}
		for _, n := range names {
			send("ca", first[n])
		}
		ch <- prometheus.MustNewConstMetric(reloadDesc, prometheus.CounterValue, float64(e.id.reloads.Load()), "ok")
		ch <- prometheus.MustNewConstMetric(reloadDesc, prometheus.CounterValue, float64(e.id.failures.Load()), "error")
		return
	}
	for _, c := range e.tc.Certificates {
		leaf := c.Leaf
		if leaf == nil && len(c.Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(c.Certificate[0])
		}
		if leaf != nil {
			send("leaf", leaf)
		}
	}
}
