// Package server wires the controller together: the daemon sessions
// (TCP), the telemetry ingest (UDP), one goroutine per Distributed
// Container running the allocator, the periodic reclaim (seed 000 §IV-C)
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
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/imageresolve"
	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/controller/internal/hist"
	"github.com/escra-dev/escra/controller/internal/ratelog"
	placementpkg "github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/controller/session"
	"github.com/escra-dev/escra/controller/spec"
	"github.com/escra-dev/escra/controller/store"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/names"
	"github.com/escra-dev/escra/internal/version"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// Config configures a controller.
type Config struct {
	// DeadHold is how long the shares of a host whose session ended stay
	// out of the pools when its daemon did not say (HostHello
	// restore_after_ms): escrad's default --restore-after plus a second.
	DeadHold time.Duration

	TCPAddr   string // daemon sessions
	UDPAddr   string // telemetry
	AdminAddr string // HTTP admin API and /metrics ("" disables)
	// Params are the allocator defaults for apps that do not set their own.
	Params allocator.Params
	// ReclaimEvery is the periodic reclaim interval (§IV-C; 0 disables).
	ReclaimEvery time.Duration
	// OOMStepBytes overrides Params.OOMStepBytes when > 0.
	OOMStepBytes int64
	// RPCTimeout bounds SetLimits and ReclaimRequest replies.
	RPCTimeout time.Duration
	Logger     *slog.Logger
	// Apps are defined at start (escra-controller --apps FILE).
	Apps []AppSpec
	// Policy picks an app's allocator policy (nil: the Escra policy).
	Policy func(app string) allocator.Policy
	// TelemetryAdvertise is the UDP address daemons are told to send
	// telemetry to (a relay or NAT in front of UDPAddr); "" = UDPAddr.
	TelemetryAdvertise string
	// TLS, when set, makes daemon sessions mutual TLS (auth.ServerConfig)
	// and telemetry authenticated with a per-session key; nil is plain mode
	// (in-process tests, escra-controller --insecure).
	TLS *tls.Config
	// AdminTLS, when set, serves the admin API over HTTPS and gives each
	// caller the role its client certificate names (auth.AdminServerConfig,
	// docs/security.md); nil is plain HTTP where every caller is admin
	// (escra-controller --insecure, in-process tests).
	AdminTLS *tls.Config
	// Pprof serves /debug/pprof/ to admins on the admin API.
	Pprof bool
	// MetricsAddr is a plain-HTTP listener serving /metrics only, for a
	// Prometheus without a client certificate ("" disables).
	MetricsAddr string
	// Store keeps the apps operators define (budgets, σ, parameters,
	// policy, deployed specs) across restarts; nil keeps them in memory.
	// The allocator's decisions are never written.
	Store store.Store
	// DefaultHostMemoryBytes stands in for a host that reports no memory
	// size when an auto-created app's member has no memory limit.
	DefaultHostMemoryBytes int64
	// HostApps limits the hosts it names to the apps listed for them (a
	// stolen host certificate then moves only those apps' budgets); hosts
	// it does not name may register any app (escra-controller --host-apps).
	HostApps map[string][]string
	// MaxContainersPerHost caps the registrations of one session (0: no
	// cap), so one host cannot grow the controller's memory without bound.
	MaxContainersPerHost int
	// Elector, when set, makes this one of several controllers sharing
	// Store: only the elected leader accepts daemon sessions and admin
	// writes (docs/operator.md, "High availability").
	Elector Elector
	// LeaderTTL is how long a leader that stopped renewing its lease
	// keeps the leadership (default 2 s).
	LeaderTTL time.Duration
	// Advertise and AdminAdvertise are the session and admin addresses
	// published while leading ("": the listeners' addresses).
	Advertise, AdminAdvertise string
	// EventHistory is how many events of each group (limit changes;
	// joins, leaves, OOM verdicts, reclaims, rollouts) GET /v1/events?since=
	// can replay (0: none; DefaultConfig: events.DefaultHistory).
	EventHistory int
	// Placement names the deployer's placement policy: "" or "deployer"
	// (spread an app's replicas, then layer-match when hosts report their
	// images, then the least loaded), or one of placement.Policies alone
	// (seed 004's comparisons; escra-controller --placement).
	Placement string
	// ResolveRegistries are the registries (host:port) the controller may
	// read manifests from to resolve an image to its layers (seed 004
	// §5.2); others resolve to their normalised name only.
	ResolveRegistries []string
	// ResolveWait bounds how long a deploy waits for an image's first
	// resolution; it goes on in the background (default 500 ms).
	ResolveWait time.Duration
	// RejoinGrace is how long after it starts (or takes over) the
	// controller hands nothing out of the pools of the apps it loads
	// (stored, or --apps; rejoinGrace): daemons that have
	// not rejoined yet still apply the limits the last controller gave
	// (escrad reconnects within 1.5 s of a controller being up; sessions
	// are declared dead after 3 s). 0: DefaultConfig's 3 s; < 0: none.
	RejoinGrace time.Duration
}

// DefaultConfig returns the paper's parameters on the default ports.
func DefaultConfig() Config {
	return Config{
		TCPAddr:                "127.0.0.1:7470",
		UDPAddr:                "127.0.0.1:7471",
		AdminAddr:              "127.0.0.1:7472",
		Params:                 allocator.DefaultParams(),
		ReclaimEvery:           5 * time.Second,
		RPCTimeout:             2 * time.Second,
		DefaultHostMemoryBytes: 1 << 30,
		MaxContainersPerHost:   1000,
		EventHistory:           events.DefaultHistory,
		DeadHold:               11 * time.Second,
		RejoinGrace:            3 * time.Second,
	}
}

// AppSpec defines a Distributed Container (seed 000 §IV-A).
type AppSpec = adminapi.AppSpec

type ref struct {
	app     *app.App
	key     allocator.Key
	appName string
	id      string
}

type host struct {
	id    uint32
	sess  *session.Session
	hello *pb.HostHello
	maxUs int64
	since time.Time

	mu   sync.RWMutex
	cont map[uint32]*ref

	// deps is the host's image and layer state (seed 004), nil until its
	// daemon reports it.
	deps atomic.Pointer[placementpkg.HostDeps]

	// Authenticated telemetry; used by the UDP goroutine only.
	mac    *wire.DatagramMAC
	replay wire.ReplayWindow
}

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

	hosts   sync.Map // uint32 → *host
	nextID  atomic.Uint32
	hub     events.Hub
	met     *metrics
	leading atomic.Bool
	term    atomic.Uint64
	decLat  hist.H
	oomLat  hist.H
	closeMu sync.Once

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
	}
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
		s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
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
		id := s.nextID.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			err := session.Serve(s.ctx, c, s, session.Config{RPCTimeout: s.cfg.RPCTimeout, Observer: s}, id)
			var rd *session.Redirect
			if err != nil && s.ctx.Err() == nil && !errors.As(err, &rd) {
				s.rl.Warn(c.RemoteAddr().String(), "daemon session ended", "err", err)
			}
		}()
	}
}

func (s *Server) reclaimLoop() {
	t := time.NewTicker(s.cfg.ReclaimEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			for _, a := range s.appList() {
				a.PeriodicReclaim()
			}
		}
	}
}

func (s *Server) appList() []*app.App {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*app.App, 0, len(s.apps))
	for _, a := range s.apps {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Server) policy(name string) allocator.Policy {
	if s.cfg.Policy != nil {
		return s.cfg.Policy(name)
	}
	return nil
}

// DefineApp creates an app or replaces its budget, and stores it
// (Config.Store). Parameters can change only while the app has no members.
func (s *Server) DefineApp(spec AppSpec) error {
	if err := s.defineApp(spec); err != nil {
		return err
	}
	return s.storeSpec(spec)
}

// defineApp is DefineApp in memory only.
func (s *Server) defineApp(spec AppSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	b := allocator.Budget{CPUCores: spec.CPUCores, MemoryBytes: spec.MemoryBytes, Sigma: spec.Sigma}
	p := spec.EffectiveParams(s.cfg.Params)
	if err := p.Validate(); err != nil {
		return fmt.Errorf("app %s: %w", spec.Name, err)
	}
	pol := s.policy(spec.Name)
	if spec.Policy != "" {
		pol, _ = allocator.PolicyByName(spec.Policy) // checked by Validate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[spec.Name]; a != nil {
		st := a.Snapshot()
		if st.Params != p || (pol != nil && st.Policy != pol.Name()) {
			if len(st.Members) > 0 {
				return fmt.Errorf("app %s: parameters and policy can change only while it has no members", spec.Name)
			}
			a.Stop()
			delete(s.apps, spec.Name)
		} else {
			if l := s.pema[spec.Name]; l.app == a && l.loop != nil && spec.SLO != nil {
				if err := l.loop.SetSLO(spec.SLO.P95.Seconds()); err != nil {
					return err
				}
			}
			if err := a.Define(b); err != nil {
				return err
			}
			s.docs[spec.Name] = spec.Spec
			return nil
		}
	}
	a, err := app.New(spec.Name, b, p, pol, false, s.log, &s.hub, s.met)
	if err != nil {
		return err
	}
	if tg, ok := pol.(*allocator.Targets); ok {
		if err := s.startPEMA(a, tg, spec); err != nil {
			a.Stop()
			return err
		}
	}
	s.apps[spec.Name] = a
	s.docs[spec.Name] = spec.Spec
	return nil
}

// appFor finds the app, creating an auto app (budget grows with its
// members, see docs/allocator.md) when it was never defined.
func (s *Server) appFor(name string, contribCores float64, contribMem int64) (*app.App, error) {
	s.mu.RLock()
	a := s.apps[name]
	s.mu.RUnlock()
	if a != nil {
		return a, nil
	}
	if err := names.ValidateApp(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[name]; a != nil {
		return a, nil
	}
	a, err := app.New(name, allocator.Budget{CPUCores: contribCores, MemoryBytes: contribMem}, s.cfg.Params,
		s.policy(name), true, s.log, &s.hub, s.met)
	if err != nil {
		return nil, err
	}
	s.apps[name] = a
	s.log.Info("auto-created app for an undefined escra.app label", "app", name,
		"cpu_cores", contribCores, "memory_bytes", contribMem)
	return a, nil
}

// rejoinGrace makes the apps a previous controller ran (the ones found in
// the state store) hand nothing out of their pools for RejoinGrace, at
// start and on taking over the leadership: their members' daemons still
// apply the limits it gave until they rejoin, and a host that rejoins
// first must not be raised into a share another host's cgroups hold.
// Apps new to the store (a first start, --store none, defined or
// auto-created later) had no previous controller and need none: holding
// them would deny their first OOM requests.
func (s *Server) rejoinGrace(stored []string) {
	if s.cfg.RejoinGrace <= 0 {
		return
	}
	for _, a := range s.appList() {
		if slices.Contains(stored, a.Name) {
			a.HoldRaisesFor(s.cfg.RejoinGrace)
		}
	}
}

func key(session, handle uint32) allocator.Key {
	return allocator.Key(uint64(session)<<32 | uint64(handle))
}

func (s *Server) host(id uint32) *host {
	v, ok := s.hosts.Load(id)
	if !ok {
		return nil
	}
	return v.(*host)
}

// --- session.Handler ---

// Hello registers a host and answers with its session id.
func (s *Server) Hello(ss *session.Session, h *pb.HostHello) (*pb.HelloAck, error) {
	if !s.leading.Load() {
		return nil, s.notLeader()
	}
	cores := int64(h.GetCores())
	if cores <= 0 || cores > 1<<16 {
		cores = 1
	}
	hs := &host{id: ss.ID, sess: ss, hello: h, maxUs: cores * s.cfg.Params.PeriodUs(), since: time.Now(),
		cont: map[uint32]*ref{}}
	if s.cfg.TLS != nil {
		cs, ok := ss.TLS()
		if !ok {
			return nil, errors.New("plain session on a TLS controller")
		}
		if err := auth.PeerHost(cs, h.GetHostId()); err != nil {
			s.met.bad("identity", 1)
			return nil, err
		}
		key, err := auth.TelemetryKey(cs, ss.ID)
		if err != nil {
			return nil, err
		}
		hs.mac = wire.NewDatagramMAC(key)
	}
	// A host reconnecting (after a partition its old session may not have
	// timed out yet) replaces its old session: one session per host id, and
	// the old one's members stop holding budget now.
	var stale []*session.Session
	s.hosts.Range(func(_, v any) bool {
		if o := v.(*host); o.hello.GetHostId() == h.GetHostId() {
			stale = append(stale, o.sess)
		}
		return true
	})
	for _, o := range stale {
		s.log.Warn("a new session of the host replaces its old one", "host", h.GetHostId(), "old_session", o.ID, "session", ss.ID)
		s.Closed(o)
		o.Close()
	}
	s.hosts.Store(ss.ID, hs)
	if !s.leading.Load() { // stepped down meanwhile
		s.hosts.Delete(ss.ID)
		return nil, s.notLeader()
	}
	s.log.Info("daemon connected", "host", h.GetHostId(), "session", ss.ID, "cores", h.GetCores(),
		"backend", h.GetBackend().String(), "peer", ss.Peer)
	taddr := s.UDPAddr()
	if s.cfg.TelemetryAdvertise != "" {
		taddr = s.cfg.TelemetryAdvertise
	}
	return &pb.HelloAck{SessionId: ss.ID, PeriodUs: uint32(s.cfg.Params.PeriodUs()), TelemetryAddr: taddr, Term: s.term.Load()}, nil
}

// Register adds a container to its app (auto-creating the app).
func (s *Server) Register(ss *session.Session, r *pb.ContainerRegister) error {
	h := s.host(ss.ID)
	if h == nil {
		return errors.New("register before hello")
	}
	if len(r.GetContainerId()) > 128 || len(r.GetName()) > 256 {
		return errors.New("register: oversized container id or name")
	}
	if allowed, ok := s.cfg.HostApps[h.hello.GetHostId()]; ok && !slices.Contains(allowed, r.GetApp()) {
		s.met.bad("app_not_allowed", 1)
		return fmt.Errorf("register: host %s may not register containers of app %q (controller --host-apps)", h.hello.GetHostId(), r.GetApp())
	}
	h.mu.RLock()
	_, dup := h.cont[r.GetHandle()]
	n := len(h.cont)
	h.mu.RUnlock()
	if dup {
		return fmt.Errorf("register: handle %d already registered on this session", r.GetHandle())
	}
	if limit := s.cfg.MaxContainersPerHost; limit > 0 && n >= limit {
		s.met.bad("too_many_containers", 1)
		return fmt.Errorf("register: host %s already has %d containers registered, the controller's --max-containers-per-host", h.hello.GetHostId(), limit)
	}
	lim := r.GetLimits()
	pUs := float64(s.cfg.Params.PeriodUs())
	cores := float64(h.maxUs) / pUs
	if q, p := lim.GetCpuQuotaUs(), lim.GetCpuPeriodUs(); q > 0 && p > 0 {
		cores = min(float64(q)/float64(p), cores)
	}
	mem := lim.GetMemoryLimitBytes()
	if mem <= 0 || mem > 1<<50 {
		mem = int64(min(h.hello.GetMemoryBytes(), 1<<50))
		if mem <= 0 {
			mem = s.cfg.DefaultHostMemoryBytes
		}
	}
	mem = max(mem, 4*allocator.MiB)
	// What the cgroup holds now (counted until replaced and acknowledged;
	// a rejoining container keeps it when it fits, allocator.Join).
	var curQ, curM int64
	if q, p := lim.GetCpuQuotaUs(), lim.GetCpuPeriodUs(); q > 0 && p > 0 {
		curQ = q * s.cfg.Params.PeriodUs() / int64(p)
	} else if q < 0 {
		curQ = h.maxUs // unlimited: it may use the whole host
	}
	if m := lim.GetMemoryLimitBytes(); m > 0 && m <= 1<<50 {
		curM = m
	}
	k := key(ss.ID, r.GetHandle())
	mi := app.MemberInfo{Key: k, Host: ss, HostID: h.hello.GetHostId(), Handle: r.GetHandle(),
		ContainerID: r.GetContainerId(), Name: r.GetName(), HostMaxUs: h.maxUs,
		MemUsage: int64(min(r.GetMemoryUsageBytes(), 1<<50)), ContribCores: cores, ContribMem: mem,
		CurQuotaUs: curQ, CurMem: curM}
	var a *app.App
	for try := 0; ; try++ {
		var err error
		if a, err = s.appFor(r.GetApp(), cores, mem); err != nil {
			return err
		}
		err = a.Join(mi)
		if err == nil {
			break
		}
		// The auto app emptied just now: it is forgotten, make it anew.
		if !errors.Is(err, app.ErrRetired) || try == 3 {
			return err
		}
		s.forget(a)
	}
	h.mu.Lock()
	h.cont[r.GetHandle()] = &ref{app: a, key: k, appName: r.GetApp(), id: r.GetContainerId()}
	h.mu.Unlock()
	return nil
}

// Unregister removes a container.
func (s *Server) Unregister(ss *session.Session, u *pb.ContainerUnregister) {
	h := s.host(ss.ID)
	if h == nil {
		return
	}
	h.mu.Lock()
	r := h.cont[u.GetHandle()]
	delete(h.cont, u.GetHandle())
	h.mu.Unlock()
	if r == nil {
		s.BadInput(ss, "unknown_container", fmt.Errorf("unregister of unknown handle %d", u.GetHandle()))
		return
	}
	r.app.Leave(r.key, u.GetReason())
	s.reap(r.app)
}

// reap forgets an auto-created app once its last member left: its state
// and metrics go with it (a defined app stays until deleted).
func (s *Server) reap(a *app.App) {
	if a.RetireIfEmpty() {
		s.forget(a)
		s.log.Info("auto-created app emptied and deleted", "app", a.Name)
	}
}

// forget removes a retired app and stops it.
func (s *Server) forget(a *app.App) {
	s.mu.Lock()
	if s.apps[a.Name] == a {
		delete(s.apps, a.Name)
		a.Stop()
	}
	s.mu.Unlock()
}

// MemoryUsage routes usage samples.
func (s *Server) MemoryUsage(ss *session.Session, m *pb.MemoryUsage) {
	h := s.host(ss.ID)
	if h == nil {
		return
	}
	for _, smp := range m.GetSamples() {
		h.mu.RLock()
		r := h.cont[smp.GetHandle()]
		h.mu.RUnlock()
		if r == nil {
			s.met.bad("unknown_container", 1)
			continue
		}
		if smp.GetUsageBytes() > 1<<50 {
			s.met.bad("absurd", 1)
			continue
		}
		r.app.Usage(r.key, int64(smp.GetUsageBytes()))
	}
}

// OOM routes a blocking OOM request to its app.
func (s *Server) OOM(ss *session.Session, id uint64, o *pb.OomRequest, recv time.Time) {
	h := s.host(ss.ID)
	var r *ref
	if h != nil {
		h.mu.RLock()
		r = h.cont[o.GetHandle()]
		h.mu.RUnlock()
	}
	if r == nil {
		s.BadInput(ss, "unknown_container", fmt.Errorf("oom request for unknown handle %d", o.GetHandle()))
		ss.Verdict(id, &pb.OomVerdict{Handle: o.GetHandle(), Granted: false, Reason: "unknown container"}, recv)
		return
	}
	r.app.OOM(r.key, id, o, recv)
}

// LeaseUse implements session.LeaseHandler (issue 11, host-local leases):
// the daemon raised a container's quota from its lease. A use naming an
// app, lease or container this session does not have is dropped and
// counted.
func (s *Server) LeaseUse(ss *session.Session, u *pb.CpuLeaseUse) {
	h := s.host(ss.ID)
	var r *ref
	if h != nil {
		h.mu.RLock()
		r = h.cont[u.GetHandle()]
		h.mu.RUnlock()
	}
	if r == nil || r.appName != u.GetApp() {
		s.BadInput(ss, "lease_unknown", fmt.Errorf("lease use for unknown container %d of app %q", u.GetHandle(), u.GetApp()))
		return
	}
	bad := func(reason string, err error) { s.BadInput(ss, reason, err) }
	r.app.LeaseUse(allocator.HostID(ss.ID), u.GetLeaseId(), r.key, u.GetAmountUs(), bad)
}

// LeaseReturn implements session.LeaseHandler: the answer to a revoke.
func (s *Server) LeaseReturn(ss *session.Session, lr *pb.CpuLeaseReturn) {
	s.mu.RLock()
	a := s.apps[lr.GetApp()]
	s.mu.RUnlock()
	if a == nil || s.host(ss.ID) == nil {
		s.BadInput(ss, "lease_unknown", fmt.Errorf("lease return for unknown app %q", lr.GetApp()))
		return
	}
	a.LeaseReturn(allocator.HostID(ss.ID), lr.GetLeaseId(), func(reason string, err error) { s.BadInput(ss, reason, err) })
}

// BadInput counts and logs (rate-limited) a dropped message.
func (s *Server) BadInput(ss *session.Session, reason string, err error) {
	s.met.bad(reason, 1)
	s.rl.Warn(ss.Peer, "bad input from daemon dropped", "reason", reason, "err", err)
}

// Closed removes the host and its containers.
func (s *Server) Closed(ss *session.Session) {
	h := s.host(ss.ID)
	if h == nil {
		return
	}
	s.hosts.Delete(ss.ID)
	h.mu.Lock()
	refs := h.cont
	h.cont = map[uint32]*ref{}
	h.mu.Unlock()
	// The daemon may still apply its last limits (a partition, or an
	// escrad that died): its shares stay out of the pools until it puts
	// Docker's back or its containers rejoin. Otherwise a partitioned host
	// and its siblings would exceed the budget together.
	hold := s.cfg.DeadHold
	if ms := h.hello.GetRestoreAfterMs(); ms > 0 {
		hold = time.Duration(ms)*time.Millisecond + time.Second
	}
	for _, r := range refs {
		r.app.LeaveHeld(r.key, "daemon session closed", hold)
	}
	for _, r := range refs {
		s.reap(r.app)
	}
	// The daemon dropped its lease credit with the session (issue 11).
	for _, a := range s.appList() {
		a.HostClosed(allocator.HostID(ss.ID), hold)
	}
	s.log.Info("daemon disconnected", "host", h.hello.GetHostId(), "session", ss.ID, "containers", len(refs))
}

// DecisionSent implements session.Observer.
func (s *Server) DecisionSent(d time.Duration) {
	s.decLat.Observe(d)
	s.met.decisionLatency.Observe(d.Seconds())
}

// VerdictSent implements session.Observer.
func (s *Server) VerdictSent(d time.Duration) {
	s.oomLat.Observe(d)
	s.met.verdictLatency.Observe(d.Seconds())
}

// --- telemetry ---

func (s *Server) onTelemetry(sessionID uint32, stats []ingest.Stat, recv int64) {
	h := s.host(sessionID)
	if h == nil {
		s.met.bad("unknown_session", len(stats))
		s.rl.Warn(fmt.Sprintf("session %d", sessionID), "telemetry for an unknown session dropped")
		return
	}
	unknown := 0
	h.mu.RLock()
	for _, st := range stats {
		r := h.cont[st.Handle]
		if r == nil {
			unknown++
			continue
		}
		if st.MidPeriod {
			r.app.ThrottleEvent(r.key, st.Seq, recv)
			continue
		}
		r.app.CPUStat(r.key, st, recv)
	}
	h.mu.RUnlock()
	// A datagram comes from one host: its updates leave in one envelope.
	h.sess.Wake()
	if unknown > 0 {
		s.met.bad("unknown_container", unknown)
	}
}

func (s *Server) dropTelemetry(reason string, n int) { s.met.bad(reason, n) }

// Verify implements ingest.Authenticator: the datagram's tag must check
// out with its session's key.
func (s *Server) Verify(session uint32, datagram []byte) bool {
	h := s.host(session)
	if h == nil || h.mac == nil {
		return false
	}
	_, ok := h.mac.Open(datagram)
	return ok
}

// Known implements ingest.SessionKnower: an open session with a key.
func (s *Server) Known(session uint32) bool {
	h := s.host(session)
	return h != nil && h.mac != nil
}

// Accept implements ingest.Authenticator: each batch_seq once per session.
func (s *Server) Accept(session uint32, batchSeq uint64) bool {
	h := s.host(session)
	return h != nil && h.replay.Accept(batchSeq)
}
