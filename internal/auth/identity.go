package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Identity is one party's trust files, reloadable while it runs: the
// certificate and key it presents, the CA it verifies peers against and a
// deny-list of certificate serials. Every handshake reads what was loaded
// last (one atomic pointer), so a reload changes the next handshake and
// never an open session; a reload that fails keeps the previous files.
type Identity struct {
	files    Files
	denyFile string
	cur      atomic.Pointer[identityState]

	mu     sync.Mutex // one reload at a time, and stamps
	stamps [4]stamp   // of the files the last reload attempt read
	hooks  []func()

	reloads, failures atomic.Uint64
}

type identityState struct {
	pair   tls.Certificate // Leaf set
	pool   *x509.CertPool
	cas    []*x509.Certificate
	denied denyList
	server *tls.Config // daemon sessions: a client certificate required
	admin  *tls.Config // admin API: a client certificate verified when shown
}

// LoadIdentity reads f and, when denyFile is not "", the deny-list
// (parseDenyList).
func LoadIdentity(f Files, denyFile string) (*Identity, error) {
	id := &Identity{files: f, denyFile: denyFile}
	if err := id.Reload(); err != nil {
		return nil, err
	}
	return id, nil
}

// Reload reads the files again. On an error the previous ones stay in use.
func (id *Identity) Reload() error {
	id.mu.Lock()
	id.stamps = id.stampNow()
	err := id.reloadLocked()
	hooks := id.hooks
	id.mu.Unlock()
	if err == nil {
		for _, h := range hooks {
			h()
		}
	}
	return err
}

// ReloadIfChanged reloads when a file's size, mtime or inode differs from
// the last attempt's (a rename by escractl certs changes the inode).
func (id *Identity) ReloadIfChanged() (bool, error) {
	id.mu.Lock()
	if id.stampNow() == id.stamps {
		id.mu.Unlock()
		return false, nil
	}
	id.mu.Unlock()
	return true, id.Reload()
}

// OnReload runs f after every successful reload (the controller ends the
// sessions of certificates denied since).
func (id *Identity) OnReload(f func()) {
	id.mu.Lock()
	id.hooks = append(id.hooks, f)
	id.mu.Unlock()
}

func (id *Identity) reloadLocked() error {
	pool, cas, err := readCAs(id.files.CA)
	if err != nil {
		id.failures.Add(1)
		return err
	}
	pair, err := tls.LoadX509KeyPair(id.files.Cert, id.files.Key)
	if err != nil {
		id.failures.Add(1)
		return fmt.Errorf("certificate %s / key %s: %w", id.files.Cert, id.files.Key, err)
	}
	var deny denyList
	if id.denyFile != "" {
		b, err := os.ReadFile(id.denyFile)
		if err != nil {
			id.failures.Add(1)
			return fmt.Errorf("deny-list: %w", err)
		}
		if deny, err = parseDenyList(id.denyFile, b); err != nil {
			id.failures.Add(1)
			return err
		}
	}
	st := &identityState{pair: pair, pool: pool, cas: cas, denied: deny}
	st.server = id.serverConfig(st, tls.RequireAndVerifyClientCert)
	st.admin = id.serverConfig(st, tls.VerifyClientCertIfGiven)
	id.cur.Store(st)
	id.reloads.Add(1)
	return nil
}

func (id *Identity) serverConfig(st *identityState, ca tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{st.pair},
		ClientAuth:   ca,
		ClientCAs:    st.pool,
		// Every connection is a full handshake, so the CA and deny-list
		// loaded last judge it (no resumption under an older CA).
		SessionTicketsDisabled: true,
		VerifyConnection:       id.verifyNotDenied,
	}
}

func (id *Identity) verifyNotDenied(cs tls.ConnectionState) error {
	if s := id.Denied(cs.PeerCertificates); s != "" {
		return fmt.Errorf("certificate serial %s is on the deny-list", s)
	}
	return nil
}

// ServerConfig is ServerConfig's (daemon sessions) over the files loaded
// last.
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return id.cur.Load().server, nil
	}}
}

// AdminServerConfig is AdminServerConfig's over the files loaded last.
func (id *Identity) AdminServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return id.cur.Load().admin, nil
	}}
}

// ClientConfig is ClientConfig's over the files loaded last. RootCAs
// cannot follow a reload, so crypto/tls's own check is off and
// VerifyConnection does the same one against the CA loaded last: the
// chain, the server name and the serverAuth key usage (x509 Verify), then
// the deny-list.
func (id *Identity) ClientConfig(serverName string) *tls.Config {
	if serverName == "" {
		serverName = ControllerName
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ServerName:         serverName,
		InsecureSkipVerify: true, // verified in VerifyConnection, never skipped
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			st := id.cur.Load()
			return &st.pair, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server showed no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: id.cur.Load().pool, Intermediates: inter,
				DNSName: serverName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return err
			}
			return id.verifyNotDenied(cs)
		},
	}
}

// Leaf is the certificate presented now.
func (id *Identity) Leaf() *x509.Certificate { return id.cur.Load().pair.Leaf }

// CAs are the CA certificates peers are verified against now.
func (id *Identity) CAs() []*x509.Certificate { return id.cur.Load().cas }

// Denied is the serial (hex) of the first of certs on the deny-list, ""
// when none is.
func (id *Identity) Denied(certs []*x509.Certificate) string {
	return id.cur.Load().denied.match(certs)
}

// Watch reloads on every signal from hup and, every interval (0: never),
// when a file changed, logging each reload in one line, until ctx ends.
func (id *Identity) Watch(ctx context.Context, every time.Duration, hup <-chan os.Signal, log *slog.Logger) {
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			id.logReload(log, "SIGHUP", id.Reload())
		case <-tick:
			if changed, err := id.ReloadIfChanged(); changed {
				id.logReload(log, "files changed", err)
			}
		}
	}
}

func (id *Identity) logReload(log *slog.Logger, cause string, err error) {
	if err != nil {
		log.Warn("TLS files not reloaded; the previous ones stay in use", "cause", cause, "err", err)
		return
	}
	leaf := id.Leaf()
	args := []any{"cause", cause, "cert", id.files.Cert, "cn", leaf.Subject.CommonName, "serial", leaf.SerialNumber.Text(16),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "ca", id.files.CA, "denied_serials", len(id.cur.Load().denied)}
	log.Info("TLS files reloaded", args...)
}

// stamp identifies a file's version without reading it.
type stamp struct {
	size, mtime int64
	ino         uint64
	missing     bool
}

func (id *Identity) stampNow() [4]stamp {
	var out [4]stamp
	for i, p := range []string{id.files.CA, id.files.Cert, id.files.Key, id.denyFile} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			out[i].missing = true
			continue
		}
		out[i].size, out[i].mtime = fi.Size(), fi.ModTime().UnixNano()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			out[i].ino = st.Ino
		}
	}
	return out
}

// readCAs reads every certificate of a PEM file.
func readCAs(path string) (*x509.CertPool, []*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("CA: %w", err)
	}
	pool := x509.NewCertPool()
	var cas []*x509.Certificate
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("CA %s: %w", path, err)
		}
		pool.AddCert(c)
		cas = append(cas, c)
	}
	if len(cas) == 0 {
		return nil, nil, fmt.Errorf("CA %s: no PEM certificate", path)
	}
	return pool, cas, nil
}
