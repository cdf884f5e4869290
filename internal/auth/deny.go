package auth

import (
	"crypto/x509"
	"fmt"
	"math/big"
	"strings"
)

// denyList holds the serials of certificates refused although the CA
// signed them (a lost key, an operator who left): lower-case hex without
// leading zeros, as big.Int.Text(16) writes them.
type denyList map[string]bool

// parseDenyList reads one hex serial a line, as openssl x509 -serial and
// the controller's logs print it (an optional "serial=" prefix, colons
// between bytes and leading zeros are ignored); "#" starts a comment.
// A line that is not a serial is an error naming it.
func parseDenyList(name string, data []byte) (denyList, error) {
	out := denyList{}
	for i, line := range strings.Split(string(data), "\n") {
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		s := strings.TrimSpace(line)
		if s == "" {
			continue
		}
		s = strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(s), "serial="), "0x")
		s = strings.ReplaceAll(s, ":", "")
		n, ok := new(big.Int).SetString(s, 16)
		if !ok || n.Sign() < 0 || len(s) > 64 {
			return nil, fmt.Errorf("deny-list %s line %d: %q is not a hex certificate serial", name, i+1, strings.TrimSpace(line))
		}
		out[n.Text(16)] = true
	}
	return out, nil
}

// match is the serial of the first of certs on the list, "" when none is.
func (d denyList) match(certs []*x509.Certificate) string {
	if len(d) == 0 {
		return ""
	}
	for _, c := range certs {
		if c.SerialNumber != nil && d[c.SerialNumber.Text(16)] {
			return c.SerialNumber.Text(16)
		}
	}
	return ""
}
