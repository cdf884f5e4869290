// Command escra-queue-proxy is Mu's queue proxy (Mu §3.1) as a
// sidecar process: it starts the function's server as its child (the
// arguments after --), queues requests in front of it to a concurrency,
// and piggybacks capacity metrics on every response for escra-gateway.
// It exits when the child exits, with its status, and forwards SIGTERM.
//
//	escra-queue-proxy -listen 127.0.0.1:9000 -upstream http://127.0.0.1:9001 \
//	    -concurrency 10 -- /demo-http -listen 127.0.0.1:9001
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/escra-dev/escra/controller/mu/queueproxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address the gateway sends to")
	upstream := flag.String("upstream", "http://127.0.0.1:9001", "the function's own server")
	conc := flag.Int("concurrency", 10, "requests let into the function at once (container concurrency)")
	maxQ := flag.Int("max-queue", 100, "requests queued beyond that; more get 503")
	flag.Parse()
	if err := run(*listen, *upstream, *conc, *maxQ, flag.Args()); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "escra-queue-proxy:", err)
		os.Exit(1)
	}
}

func run(listen, upstream string, conc, maxQ int, child []string) error {
	p, err := queueproxy.New(upstream, conc, maxQ)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go p.Run(ctx)
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	if len(child) == 0 {
		<-ctx.Done()
		return nil
	}
	cmd := exec.Command(child[0], child[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", child[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			slog.Info("function exited", "err", err)
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		return nil
	}
}
