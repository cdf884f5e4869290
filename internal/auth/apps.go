package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// A host certificate binds its host to the apps whose containers it may
// register, one URI SAN each: urn:escra:app:NAME, or urn:escra:app:* for
// any app. The CA signs the binding, so a stolen host key moves only the
// budgets of the apps its certificate names (docs/security.md).
const appURIPrefix = "urn:escra:app:"

// AnyApp binds a host to every app.
const AnyApp = "*"

var appName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// CheckAppBinding rejects a name that cannot be bound in a certificate.
func CheckAppBinding(a string) error {
	if a != AnyApp && !appName.MatchString(a) {
		return fmt.Errorf("app %q: want 1-63 of [A-Za-z0-9_.-], or * for any app", a)
	}
	return nil
}

func appURI(a string) *url.URL { return &url.URL{Scheme: "urn", Opaque: "escra:app:" + a} }

// CertApps are the apps a certificate binds its host to.
func CertApps(leaf *x509.Certificate) []string {
	var out []string
	for _, u := range leaf.URIs {
		if a, ok := strings.CutPrefix(u.String(), appURIPrefix); ok && CheckAppBinding(a) == nil {
			out = append(out, a)
		}
	}
	return out
}

// PeerApps are the apps the verified client certificate binds its host to
// (nil without one).
func PeerApps(cs tls.ConnectionState) []string {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return CertApps(cs.VerifiedChains[0][0])
}
