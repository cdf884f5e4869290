// Command escra-gateway is Mu's ingress gateway (the Mu paper): it
// routes /fn/NAME/... (or Host NAME.*) to a replica of function NAME,
// balances with the function's policy, strips the queue proxy's
// piggybacked metrics, and scales each function every 2 s through the
// Escra controller within the function's app budget.
//
//	escra-gateway -controller https://127.0.0.1:7472 -certs /etc/escra \
//	    -config functions.json -listen 127.0.0.1:8088 -admin 127.0.0.1:8089
//
// It reaches the controller's admin API with mutual TLS and
// DIR/scaler.pem (escractl certs): a certificate that may only read and
// add or remove containers; an http:// controller URL is for a controller
// run --insecure.
//
// functions.json is a JSON list of gateway.Function ("slo" in Go duration
// syntax, e.g. "1s"). The admin address serves /metrics (Prometheus) and
// /v1/functions (JSON, read by `escractl get functions` and `escractl top
// --gateway`).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/mu/gateway"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "escra-gateway:", err)
		os.Exit(1)
	}
}

// LoadFunctions reads a functions file.
func loadFunctions(path string) ([]gateway.Function, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw []struct {
		gateway.Function
		SLO string `json:"slo"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	out := make([]gateway.Function, len(raw))
	for i, r := range raw {
		out[i] = r.Function
		d, err := time.ParseDuration(r.SLO)
		if err != nil {
			return nil, fmt.Errorf("%s: function %q: slo %q: want a duration like 1s", path, r.Name, r.SLO)
		}
		out[i].SLO = d
		if err := out[i].Validate(); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no functions", path)
	}
	return out, nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("escra-gateway", flag.ContinueOnError)
	ctrl := fs.String("controller", adminclient.DefaultURL, "controller admin URL")
	cfg := fs.String("config", "", "functions file (JSON)")
	listen := fs.String("listen", "127.0.0.1:8088", "address clients call")
	admin := fs.String("admin", "127.0.0.1:8089", "address of /metrics and /v1/functions")
	prefix := fs.String("prefix", "mu-", "container name prefix of the replicas")
	basePort := fs.Int("base-port", 20000, "first 127.0.0.1 port of the replicas (two per replica)")
	// Under systemd with LoadCredential= (a dynamic user that cannot read
	// /etc/escra/*-key.pem) the files are in $CREDENTIALS_DIRECTORY.
	certDir := auth.DefaultDir
	if d := os.Getenv("CREDENTIALS_DIRECTORY"); d != "" {
		certDir = d
	}
	certs := fs.String("certs", certDir, "directory of ca.pem and the certificate for the controller's admin API (escractl certs)")
	role := fs.String("cert-role", auth.RoleScaler, "which certificate of -certs to show: scaler (read, add and remove containers) or admin")
	proxyPath := fs.String("queue-proxy", "/escra-queue-proxy", "path of the queue proxy inside the function images")
	nodeSelect := fs.String("node-select", gateway.DefaultNodeSelect, "where new replicas go (Mu Algorithm 3): alignment, worstfit, bestfit, default (Kubernetes' least allocated + balanced), or controller (the controller's deployer)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	check := fs.Bool("check-config", false, "read the functions file and the certificate, then exit (systemd's ExecStartPre)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		fmt.Println("escra-gateway", version.Version)
		return nil
	}
	if *cfg == "" {
		return errors.New("-config is required (a JSON list of functions)")
	}
	fns, err := loadFunctions(*cfg)
	if err != nil {
		return err
	}
	cl, err := controllerClient(*ctrl, *certs, *role)
	if err != nil {
		return err
	}
	if *check {
		fmt.Printf("escra-gateway: %d functions in %s, controller %s\n", len(fns), *cfg, *ctrl)
		return nil
	}
	sc := &gateway.ControllerScaler{Client: cl, Prefix: *prefix, BasePort: *basePort, ProxyPath: *proxyPath}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	g, err := gateway.New(fns, sc, log)
	if err != nil {
		return err
	}
	if err := g.SetNodeSelect(*nodeSelect); err != nil {
		return fmt.Errorf("-node-select: %w", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	aln, err := net.Listen("tcp", *admin)
	if err != nil {
		ln.Close()
		return err
	}
	// Replicas a crashed gateway left behind are taken over before the
	// first request, so no new replica takes one of their ports.
	if err := g.Adopt(ctx); err != nil {
		log.Warn("gateway: not every function's earlier replicas could be looked up", "err", err)
	}
	// A function with initial_scale meets its first requests warm (as
	// Knative holds a revision's readiness until its initial scale).
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
	if err := g.Prescale(pctx); err != nil {
		log.Warn("gateway: initial scale not reached, serving anyway", "err", err)
	}
	pcancel()
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	asrv := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go asrv.Serve(aln)
	log.Info("gateway up", "listen", ln.Addr().String(), "admin", aln.Addr().String(), "functions", len(fns))
	g.Run(ctx)
	srv.Close()
	asrv.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return g.Shutdown(sctx)
}
