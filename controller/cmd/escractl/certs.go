package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/escra-dev/escra/internal/auth"
)

// cmdCerts creates the CA (or reuses DIR/ca.pem + ca-key.pem) and issues
// the controller's and each host's certificate for mutual TLS.
func cmdCerts(e *env, args []string) error {
	fs := e.flags("certs")
	dir := fs.String("dir", e.certs, "")
	hosts := fs.String("hosts", "", "")
	names := fs.String("controller-names", "", "")
	days := fs.Int("days", 825, "")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("certs: unexpected argument %q (usage: escractl certs [--dir DIR] --hosts h1,h2 [--controller-names n1,ip] [--days N])", pos[0])
	}
	if *days <= 0 || *days > 36500 {
		return usageErr("certs: --days %d out of range [1, 36500]", *days)
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
	iss, err := auth.Generate(*dir, split(*hosts), split(*names), time.Duration(*days)*24*time.Hour)
	if err != nil {
		return fmt.Errorf("certs: %v", err)
	}
	for _, f := range iss.Files {
		fmt.Fprintln(e.stdout, f)
	}
	return nil
}
