package auth

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/prometheus/client_golang/prometheus"
)

var expiryDesc = prometheus.NewDesc("escra_tls_certificate_expiry_timestamp_seconds",
	"When the certificate this process presents expires (NotAfter, Unix seconds); escractl certs --days sets it.",
	[]string{"cn"}, nil)

// ExpiryCollector exports the NotAfter of the certificate tc presents, so
// an alert can fire before mutual TLS stops working. The files are read
// once at start: the value changes with a restart after new files.
func ExpiryCollector(tc *tls.Config) prometheus.Collector { return expiry{tc} }

type expiry struct{ tc *tls.Config }

func (expiry) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

func (e expiry) Collect(ch chan<- prometheus.Metric) {
	for _, c := range e.tc.Certificates {
		leaf := c.Leaf
		if leaf == nil && len(c.Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(c.Certificate[0])
		}
		if leaf != nil {
			ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(leaf.NotAfter.Unix()), leaf.Subject.CommonName)
		}
	}
}
