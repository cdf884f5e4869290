package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"slices"
	"time"
)

// Roles of the admin API's callers. An operator certificate carries its
// role as an OrganizationalUnit signed by the CA; a host certificate has
// none and so has no admin rights at all.
const (
	RoleAdmin  = "admin"  // everything
	RoleViewer = "viewer" // reads: apps, containers, hosts, events, /metrics
	// RoleScaler is an autoscaler's (escra-gateway, Mu §3.3): the reads,
	// and adding or removing containers of an app that exists; no
	// budgets, deploys or deletes of apps.
	RoleScaler = "scaler"
	RoleHost   = "host" // a daemon's certificate: no admin API
)

// roleOU is the OrganizationalUnit that grants a role.
func roleOU(role string) string { return "escra-" + role }

// operatorRoles are the certificates escractl certs issues besides the
// controller's and the hosts': DIR/admin.pem, viewer.pem and scaler.pem.
var operatorRoles = []string{RoleAdmin, RoleViewer, RoleScaler}

// operatorTemplate is a client-auth-only certificate for role.
func operatorTemplate(role string, notBefore time.Time, validFor time.Duration) *x509.Certificate {
	return &x509.Certificate{
		Subject:   pkix.Name{CommonName: role, Organization: []string{"escra"}, OrganizationalUnit: []string{roleOU(role)}},
		NotBefore: notBefore, NotAfter: notBefore.Add(validFor),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// certRole is the role a verified leaf grants: admin, viewer or scaler when it
// carries that OU, host otherwise.
func certRole(leaf *x509.Certificate) string {
	for _, r := range operatorRoles {
		if slices.Contains(leaf.Subject.OrganizationalUnit, roleOU(r)) {
			return r
		}
	}
	return RoleHost
}

// ClientRole is the role of a TLS client: "" when it showed no verified
// certificate.
func ClientRole(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return certRole(cs.VerifiedChains[0][0])
}

// AdminServerConfig is the admin API's: TLS 1.3, the controller's
// certificate, and a client certificate verified against the CA when one
// is shown. A caller without one completes the handshake so that it can be
// told in plain words (401) what it lacks; no request succeeds without a
// role (controller/server).
func AdminServerConfig(f Files) (*tls.Config, error) {
	pool, pair, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
	}, nil
}
