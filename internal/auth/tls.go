package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// Files names a party's trust files.
type Files struct{ CA, Cert, Key string }

func (f Files) load() (*x509.CertPool, tls.Certificate, error) {
	var none tls.Certificate
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, none, fmt.Errorf("CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, none, fmt.Errorf("CA %s: no PEM certificate", f.CA)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, none, fmt.Errorf("certificate %s / key %s: %w", f.Cert, f.Key, err)
	}
	return pool, pair, nil
}

// ServerConfig is the controller's: TLS 1.3 only, a client certificate
// signed by the CA is required (ExtKeyUsage clientAuth).
func ServerConfig(f Files) (*tls.Config, error) {
	pool, pair, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// ClientConfig is a daemon's: TLS 1.3 only, the controller's certificate
// must be signed by the CA and name serverName (ControllerName when empty).
func ClientConfig(f Files, serverName string) (*tls.Config, error) {
	pool, pair, err := f.load()
	if err != nil {
		return nil, err
	}
	if serverName == "" {
		serverName = ControllerName
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		RootCAs:      pool,
		ServerName:   serverName,
	}, nil
}

// PeerHost checks that the verified client certificate names host (CN or
// DNS SAN), so one host's certificate cannot speak for another host.
func PeerHost(cs tls.ConnectionState, host string) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return errors.New("no verified client certificate")
	}
	leaf := cs.VerifiedChains[0][0]
	if r := certRole(leaf); r != RoleHost {
		// An operator's certificate is for the admin API, not a host.
		return fmt.Errorf("client certificate is the %s operator's, not a host's", r)
	}
	if leaf.Subject.CommonName == host {
		return nil
	}
	for _, n := range leaf.DNSNames {
		if n == host {
			return nil
		}
	}
	return fmt.Errorf("client certificate (CN %q) does not name host %q", leaf.Subject.CommonName, host)
}

// telemetryLabel is the exporter label of the telemetry key.
const telemetryLabel = "EXPORTER-escra-telemetry-v1"

// TelemetryKey derives the session's 32-byte datagram key from the TLS
// session (both ends compute it; it never crosses the wire).
func TelemetryKey(cs tls.ConnectionState, session uint32) ([]byte, error) {
	if cs.Version != tls.VersionTLS13 {
		return nil, errors.New("telemetry key needs TLS 1.3")
	}
	var ctx [4]byte
	binary.BigEndian.PutUint32(ctx[:], session)
	return cs.ExportKeyingMaterial(telemetryLabel, ctx[:], 32)
}
