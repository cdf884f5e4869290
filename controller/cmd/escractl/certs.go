package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/escra-dev/escra/internal/auth"
)

// runCerts creates the CA (or reuses DIR/ca.pem + ca-key.pem) and issues
// the controller's and each host's certificate for mutual TLS, the hosts'
// bound to apps; with user, only that operator's certificate.
func runCerts(e *env, dir, hosts, apps, names, user, role string, days int) error {
	if days <= 0 || days > 36500 {
		return usageErr("certs: --days %d out of range [1, 36500]", days)
	}
	if user != "" {
		if hosts != "" || apps != "" || names != "" {
			return usageErr("certs: --user issues one operator's certificate; give --hosts, --apps and --controller-names in another run")
		}
		if role != auth.RoleAdmin && role != auth.RoleViewer && role != auth.RoleScaler {
			return usageErr("certs: --role %q: want admin, viewer or scaler", role)
		}
		iss, err := auth.IssueUser(dir, user, role, time.Duration(days)*24*time.Hour)
		if err != nil {
			return fmt.Errorf("certs: %v", err)
		}
		for _, f := range iss.Files {
			fmt.Fprintln(e.stdout, f)
		}
		return nil
	}
	if role != "" {
		return usageErr("certs: --role goes with --user")
	}
	split := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	iss, err := auth.GenerateBound(dir, split(hosts), split(apps), split(names), time.Duration(days)*24*time.Hour)
	if err != nil {
		return fmt.Errorf("certs: %v", err)
	}
	for _, f := range iss.Files {
		fmt.Fprintln(e.stdout, f)
	}
	return nil
}
