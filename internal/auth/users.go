package auth

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// CheckUserName rejects an operator name that cannot be a file name, or
// that is one of the fixed files' (ca, controller) or roles' names.
func CheckUserName(u string) error {
	if !hostName.MatchString(u) || u == "ca" || u == "controller" || u == "ca-key" || u == RoleAdmin || u == RoleViewer || u == RoleScaler || u == RoleHost {
		return fmt.Errorf("user name %q: want 1-253 of [A-Za-z0-9_.-], not ca, controller, admin, viewer, scaler or host", u)
	}
	return nil
}

// IssueUser writes dir/NAME.pem (+key): one operator's client certificate,
// CN NAME (what the controller's audit log names) with role's OU, signed
// by the existing CA of dir. It never creates a CA: an operator's
// certificate is only worth something from the CA the controller trusts.
func IssueUser(dir, name, role string, validFor time.Duration) (Issued, error) {
	var out Issued
	if err := CheckUserName(name); err != nil {
		return out, err
	}
	if role != RoleAdmin && role != RoleViewer && role != RoleScaler {
		return out, fmt.Errorf("role %q: want admin, viewer or scaler", role)
	}
	if validFor <= 0 {
		return out, errors.New("validity must be positive")
	}
	if _, err := os.Stat(CAPath(dir)); err != nil {
		return out, fmt.Errorf("no CA in %s (escractl certs --dir %s makes one): %w", dir, dir, err)
	}
	if err := checkKind(dir, name, true); err != nil {
		return out, err
	}
	ca, caKey, _, err := loadOrCreateCA(dir, CAValidity)
	if err != nil {
		return out, err
	}
	t := operatorTemplate(role, time.Now().Add(-5*time.Minute), validFor)
	t.Subject.CommonName = name
	if err := issue(dir, name, t, ca, caKey); err != nil {
		return out, err
	}
	out.Files = append(out.Files, CertPath(dir, name), KeyPath(dir, name))
	return out, nil
}

// checkKind refuses to replace dir/NAME.pem when it holds the other kind
// of certificate (a host's by an operator's, or the reverse): one name,
// one party.
func checkKind(dir, name string, operator bool) error {
	c, err := readCert(CertPath(dir, name))
	if err != nil {
		return nil // absent or unreadable: nothing of another party to keep
	}
	if isOp := certRole(c) != RoleHost; isOp != operator {
		kind := "a host's"
		if isOp {
			kind = "an operator's"
		}
		return fmt.Errorf("%s holds %s certificate (CN %s); pick another name", CertPath(dir, name), kind, c.Subject.CommonName)
	}
	return nil
}
