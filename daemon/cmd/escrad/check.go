package main

import (
	"fmt"
	"net"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/auth"
)

// checkInput is what --check-config looks at beyond the flag ranges run
// has already checked.
type checkInput struct {
	Insecure                                  bool
	TLSCA, TLSCert, TLSKey, TLSServer, HostID string
	Metrics                                   string
	NoDocker                                  bool
	DockerHost                                string
	Agent                                     agent.Config
}

// checkConfig is escrad --check-config (like nginx -t): everything that
// can be checked without taking the engine lock, touching cgroups or
// connecting anywhere. systemd runs it as ExecStartPre, so a bad edit of
// /etc/escra/escrad.yaml fails the start (and a restart after an upgrade)
// with one line in the journal instead of a crash loop.
func checkConfig(in checkInput) error {
	if !in.Insecure {
		cert, key := in.TLSCert, in.TLSKey
		if cert == "" {
			cert = auth.CertPath(auth.DefaultDir, in.HostID)
		}
		if key == "" {
			key = auth.KeyPath(auth.DefaultDir, in.HostID)
		}
		if _, err := auth.ClientConfig(auth.Files{CA: in.TLSCA, Cert: cert, Key: key}, in.TLSServer); err != nil {
			return fmt.Errorf("TLS: %v (create the files with escractl certs --hosts %s, or set insecure: true)", err, in.HostID)
		}
	}
	if in.Metrics != "" {
		if _, _, err := net.SplitHostPort(in.Metrics); err != nil {
			return fmt.Errorf("--metrics-listen %q: %w", in.Metrics, err)
		}
	}
	if !in.NoDocker {
		cli, err := containers.NewDockerClient(in.DockerHost)
		if err != nil {
			return fmt.Errorf("--docker-host %q: %w", in.DockerHost, err)
		}
		cli.Close()
	}
	return agent.Validate(in.Agent)
}
