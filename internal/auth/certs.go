// Package auth is the trust set-up of the controller ↔ daemon channel: a
// private CA with ECDSA P-256 certificates (escractl certs), mutual TLS 1.3
// configurations for both ends, and the per-session telemetry key derived
// from the TLS session (RFC 8446 §7.5 exporter), so datagrams can be
// authenticated without another handshake.
package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// ControllerName is the identity in the controller's certificate; daemons
// verify the controller against it (not against the address they dial, so
// an operator may reach the controller by any address).
const ControllerName = "escra-controller"

// DefaultDir holds the files by default.
const DefaultDir = "/etc/escra"

// Paths of a host's (or the controller's) files in dir.
func CAPath(dir string) string         { return filepath.Join(dir, "ca.pem") }
func CAKeyPath(dir string) string      { return filepath.Join(dir, "ca-key.pem") }
func CertPath(dir, name string) string { return filepath.Join(dir, name+".pem") }
func KeyPath(dir, name string) string  { return filepath.Join(dir, name+"-key.pem") }

var hostName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$`)

// CheckHostName rejects names that cannot be a file name and a DNS SAN.
func CheckHostName(h string) error {
	if !hostName.MatchString(h) || h == "ca" || h == "controller" || h == "ca-key" || h == RoleAdmin || h == RoleViewer || h == RoleScaler {
		return fmt.Errorf("host name %q: want 1-253 of [A-Za-z0-9_.-], not ca, controller, admin, viewer or scaler", h)
	}
	return nil
}

// Issued lists the files a Generate call wrote.
type Issued struct{ Files []string }

// Generate creates dir/ca.pem and ca-key.pem (reusing them when present),
// dir/controller.pem (+key) valid for ControllerName, localhost, 127.0.0.1
// and extraControllerSANs, and dir/HOST.pem (+key) for each host: client
// certificates whose CN and DNS name are the host id the daemon reports,
// and the operators' dir/admin.pem, viewer.pem and scaler.pem (+key) for
// the admin API. The host certificates bind no app (GenerateBound).
func Generate(dir string, hosts, extraControllerSANs []string, validFor time.Duration) (Issued, error) {
	return GenerateBound(dir, hosts, nil, extraControllerSANs, validFor)
}

// GenerateBound is Generate with each host certificate bound to apps
// (CertApps): the apps whose containers the host may register.
func GenerateBound(dir string, hosts, apps, extraControllerSANs []string, validFor time.Duration) (Issued, error) {
	var out Issued
	for _, h := range hosts {
		if err := CheckHostName(h); err != nil {
			return out, err
		}
	}
	var uris []*url.URL
	for _, a := range apps {
		if err := CheckAppBinding(a); err != nil {
			return out, err
		}
		uris = append(uris, appURI(a))
	}
	if validFor <= 0 {
		return out, errors.New("validity must be positive")
	}
	for _, h := range hosts {
		if err := checkKind(dir, h, false); err != nil {
			return out, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return out, err
	}
	ca, caKey, created, err := loadOrCreateCA(dir, max(CAValidity, validFor+24*time.Hour))
	if err != nil {
		return out, err
	}
	if created {
		out.Files = append(out.Files, CAPath(dir), CAKeyPath(dir))
	}
	now := time.Now().Add(-5 * time.Minute) // tolerate small clock skew
	ctl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: ControllerName, Organization: []string{"escra"}},
		DNSNames:    []string{ControllerName, "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:   now, NotAfter: now.Add(validFor),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, s := range extraControllerSANs {
		if ip := net.ParseIP(s); ip != nil {
			ctl.IPAddresses = append(ctl.IPAddresses, ip)
		} else if hostName.MatchString(s) {
			ctl.DNSNames = append(ctl.DNSNames, s)
		} else {
			return out, fmt.Errorf("controller name %q: not an IP address or DNS name", s)
		}
	}
	if err := issue(dir, "controller", ctl, ca, caKey); err != nil {
		return out, err
	}
	out.Files = append(out.Files, CertPath(dir, "controller"), KeyPath(dir, "controller"))
	for _, h := range hosts {
		t := &x509.Certificate{
			Subject:   pkix.Name{CommonName: h, Organization: []string{"escra"}},
			DNSNames:  []string{h},
			URIs:      uris,
			NotBefore: now, NotAfter: now.Add(validFor),
			KeyUsage: x509.KeyUsageDigitalSignature,
			// A daemon certificate cannot serve as the controller's.
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if err := issue(dir, h, t, ca, caKey); err != nil {
			return out, err
		}
		out.Files = append(out.Files, CertPath(dir, h), KeyPath(dir, h))
	}
	for _, r := range operatorRoles {
		if err := issue(dir, r, operatorTemplate(r, now, validFor), ca, caKey); err != nil {
			return out, err
		}
		out.Files = append(out.Files, CertPath(dir, r), KeyPath(dir, r))
	}
	return out, nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// CAValidity is a new CA's lifetime: leaf certificates live days
// (DefaultValidity) and are reissued from it; the CA changes rarely, as
// every party must trust the new one first (docs/security.md).
const CAValidity = 10 * 365 * 24 * time.Hour

// DefaultValidity is escractl certs' leaf lifetime: short, so a copied key
// is worth little for long, and rotation without restart is routine.
const DefaultValidity = 30 * 24 * time.Hour

func loadOrCreateCA(dir string, validFor time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	if _, err := os.Stat(CAPath(dir)); err == nil {
		cert, err := readCert(CAPath(dir))
		if err != nil {
			return nil, nil, false, err
		}
		key, err := readKey(CAKeyPath(dir))
		if err != nil {
			return nil, nil, false, fmt.Errorf("existing CA without its key: %w", err)
		}
		return cert, key, false, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, false, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, false, err
	}
	now := time.Now().Add(-5 * time.Minute)
	t := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "escra CA", Organization: []string{"escra"}},
		NotBefore:    now, NotAfter: now.Add(validFor),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, t, t, &key.PublicKey, key)
	if err != nil {
		return nil, nil, false, err
	}
	if err := writeKey(CAKeyPath(dir), key); err != nil {
		return nil, nil, false, err
	}
	if err := writePEM(CAPath(dir), "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, false, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, true, err
}

func issue(dir, name string, t *x509.Certificate, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if t.SerialNumber, err = serial(); err != nil {
		return err
	}
	if t.NotAfter.After(ca.NotAfter) {
		t.NotAfter = ca.NotAfter // not valid past its CA anyway
	}
	der, err := x509.CreateCertificate(rand.Reader, t, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(KeyPath(dir, name), key); err != nil {
		return err
	}
	return writePEM(CertPath(dir, name), "CERTIFICATE", der, 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// writePEM replaces path atomically (temp file + rename).
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return x509.ParseCertificate(blk.Bytes)
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an ECDSA key", path)
	}
	return ek, nil
}
