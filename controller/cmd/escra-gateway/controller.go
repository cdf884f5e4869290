package main

import (
	"fmt"
	"strings"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/internal/auth"
)

// controllerClient is the gateway's admin-API client: plain HTTP only for
// an http:// URL (a controller run --insecure), else mutual TLS with
// DIR/ROLE.pem from escractl certs; the scaler role may read and add or
// remove containers, nothing else.
func controllerClient(url, dir, role string) (*adminclient.Client, error) {
	if strings.HasPrefix(url, "http://") {
		return adminclient.New(url)
	}
	tc, err := adminclient.OperatorTLS(dir, role)
	if err != nil {
		return nil, fmt.Errorf("no %s certificate in %s: %v (escractl certs --dir %s makes %s; or -controller http://HOST:PORT for a controller run --insecure)",
			role, dir, err, dir, auth.CertPath(dir, role))
	}
	return adminclient.NewTLS(url, tc)
}
