// Package server wires the controller together: the daemon sessions
// (TCP), the telemetry ingest (UDP), one goroutine per Distributed
// Container running the allocator, the periodic reclaim (Escra §IV-C)
// and the admin HTTP API with Prometheus metrics.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/imageresolve"
	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/controller/internal/hist"
	"github.com/escra-dev/escra/controller/internal/ratelog"
	"github.com/escra-dev/escra/controller/session"
	"github.com/escra-dev/escra/controller/spec"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/version"
)

// Server is a running controller.
type Server struct {
	cfg    Config
	log    *slog.Logger
	rl     *ratelog.Limiter
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	tcp     net.Listener
	udp     *ingest.Listener
	adminLn net.Listener
	admin   *http.Server

	metricsLn  net.Listener
	metricsSrv *http.Server

	mu   sync.RWMutex
	apps map[string]*app.App
	// docs are the specs apps were applied with (escractl get -o yaml);
	// deployed the containers last deployed for each app (the rollout
	// compares against them). Both under mu.
	docs     map[string]*spec.Doc
	deployed map[string]DeployRequest
	rollMu   sync.Mutex         // one deploy or rollout at a time
	pema     map[string]pemaRef // the pema policy's loops, by app (under mu)

	hosts  sync.Map // uint32 → *host
	nextID atomic.Uint32
	conns  atomic.Int64 // open session connections (limits.go)
	// containerIDs: container id → the session that registered it (scope.go).
	containerIDs sync.Map
	hub          events.Hub
	met          *metrics
	leading      atomic.Bool
	term         atomic.Uint64
	decLat       hist.H
	oomLat       hist.H
	closeMu      sync.Once

	resolveOnce sync.Once
	resolver    *imageresolve.Resolver
}

// Start listens on the configured addresses and returns once ready.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OOMStepBytes > 0 {
		cfg.Params.OOMStepBytes = cfg.OOMStepBytes
	}
	if err := cfg.Params.Validate(); err != nil {
		return nil, fmt.Errorf("allocator params: %w", err)
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = 2 * time.Second
	}
	if cfg.DefaultHostMemoryBytes <= 0 {
		cfg.DefaultHostMemoryBytes = 1 << 30
	}
	s := &Server{cfg: cfg, log: cfg.Logger, rl: ratelog.New(cfg.Logger), apps: map[string]*app.App{},
		docs: map[string]*spec.Doc{}, deployed: map[string]DeployRequest{}}
	s.hub.Keep(cfg.EventHistory)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.met = newMetrics(s)
	// Heap, goroutines and descriptors on /metrics (make soak reads them).
	s.met.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.Collector("escra-controller"))
	if cfg.Identity != nil {
		s.identity()
	} else if cfg.TLS != nil {
		s.met.reg.MustRegister(auth.ExpiryCollector(cfg.TLS))
	}
	// Stored apps first; --apps entries then override and are stored.
	// Under an election this waits for the win (takeOver).
	if cfg.Elector == nil {
		s.leading.Store(true)
		stored, err := s.loadStore()
		if err != nil {
			s.cancel()
			return nil, err
		}
		for _, a := range cfg.Apps {
			if err := s.DefineApp(a); err != nil {
				s.cancel()
				return nil, err
			}
		}
		s.rejoinGrace(stored)
	} else {
		if cfg.LeaderTTL <= 0 {
			s.cfg.LeaderTTL = 2 * time.Second
		}
		s.leaderMetrics()
	}
	var err error
	if s.udp, err = ingest.Listen(cfg.UDPAddr, s.onTelemetry, s.dropTelemetry, s.rl); err != nil {
		s.cancel()
		return nil, fmt.Errorf("telemetry listen %s: %w", cfg.UDPAddr, err)
	}
	if s.tcp, err = net.Listen("tcp", cfg.TCPAddr); err != nil {
		s.udp.Close()
		s.cancel()
		return nil, fmt.Errorf("session listen %s: %w", cfg.TCPAddr, err)
	}
	if cfg.TLS != nil {
		s.tcp = tls.NewListener(s.tcp, cfg.TLS)
		s.udp.Auth = s
		// One telemetry socket per session: a flood of the port does not
		// overflow the hosts' receive buffers (ingest/pinned.go).
		s.udp.PinSessions(cfg.MaxSessions)
	}
	s.udp.LimitPerSource(cfg.TelemetryRatePerSource, int(cfg.TelemetryRatePerSource))
	if cfg.AdminAddr != "" {
		if s.adminLn, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			s.udp.Close()
			s.tcp.Close()
			s.cancel()
			return nil, fmt.Errorf("admin listen %s: %w", cfg.AdminAddr, err)
		}
		if cfg.AdminTLS != nil {
			s.adminLn = tls.NewListener(s.adminLn, cfg.AdminTLS)
		}
		// Refused handshakes (no CA, a deny-listed serial) in the log's own format.
		s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.admin.Serve(s.adminLn) }()
	}
	if err := s.startMetrics(); err != nil {
		s.Close()
		return nil, err
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.udp.Serve(s.ctx) }()
	go func() { defer s.wg.Done(); s.acceptLoop() }()
	if cfg.ReclaimEvery > 0 {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.reclaimLoop() }()
	}
	if cfg.Elector != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.leadLoop() }()
	}
	context.AfterFunc(ctx, func() { s.Close() })
	return s, nil
}

// TCPAddr is the session listener's address.
func (s *Server) TCPAddr() string { return s.tcp.Addr().String() }

// UDPAddr is the telemetry listener's address.
func (s *Server) UDPAddr() string { return s.udp.Addr() }

// AdminAddr is the admin HTTP address ("" when disabled).
func (s *Server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Close stops everything and waits for the goroutines.
func (s *Server) Close() error {
	s.closeMu.Do(func() {
		s.cancel()
		s.tcp.Close()
		s.udp.Close()
		for _, h := range []*http.Server{s.admin, s.metricsSrv} {
			if h != nil {
				sctx, cancel := context.WithTimeout(context.Background(), time.Second)
				h.Shutdown(sctx)
				cancel()
			}
		}
		s.hosts.Range(func(_, v any) bool { v.(*host).sess.Close(); return true })
		s.wg.Wait()
		s.mu.Lock()
		for _, a := range s.apps {
			a.Stop()
		}
		s.mu.Unlock()
	})
	return nil
}

func (s *Server) acceptLoop() {
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		if !s.admit(c) {
			c.Close()
			continue
		}
		id := s.nextID.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.release()
			err := session.Serve(s.ctx, c, s, session.Config{RPCTimeout: s.cfg.RPCTimeout, DeadAfter: s.cfg.DaemonDeadAfter, Observer: s,
				MsgRate: s.cfg.SessionMsgRate, MsgBurst: s.cfg.SessionMsgBurst, MayAct: s.mayAct()}, id)
			var rd *session.Redirect
			if err != nil && s.ctx.Err() == nil && !errors.As(err, &rd) {
				s.rl.Warn(c.RemoteAddr().String(), "daemon session ended", "err", err)
			}
		}()
	}
}

// Each app reclaims once every ReclaimEvery (§IV-C), the apps spread over
// the interval: all at once, every host got one reclaim request per app in
// the same instant, and an OOM request that waits for its app's reclaim
// waited for the daemons to get through the whole burst.
func (s *Server) reclaimLoop() {
	var round []*app.App
	next := 0
	t := time.NewTimer(s.cfg.ReclaimEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if next >= len(round) { // a new round, of the apps there are now
			round, next = s.appList(), 0
		}
		if next < len(round) {
			round[next].PeriodicReclaim()
			next++
		}
		t.Reset(s.cfg.ReclaimEvery / time.Duration(max(len(round), 1)))
	}
}
