// Command escra-controller runs the Distributed Containers: their global
// pools and the resource allocator that decides every container's limits
// from the daemons' telemetry and OOM requests (Escra §IV-C, §IV-D).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/controller/spec"
	"github.com/escra-dev/escra/controller/store"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/version"
)

// bytesFlag accepts 50MiB, 1GiB, 1048576.
type bytesFlag struct{ v *int64 }

func (b bytesFlag) String() string {
	if b.v == nil {
		return ""
	}
	return spec.FormatBytes(*b.v)
}
func (b bytesFlag) Set(s string) error {
	n, err := spec.ParseBytes(s)
	if err != nil {
		return err
	}
	*b.v = n
	return nil
}

// The --apps file is specs (docs/spec.md), the same format escractl apply
// takes: one or more apps, as YAML documents or a list; their containers,
// if any, are not deployed by the controller. appEntry is the older
// format (a list of {name, cpu, memory, sigma, policy}), still read.
type appEntry struct {
	Name   string  `yaml:"name"`
	CPU    string  `yaml:"cpu"`    // cores: "2", "1.5", "500m"
	Memory string  `yaml:"memory"` // "2GiB"
	Sigma  float64 `yaml:"sigma"`
	Policy string  `yaml:"policy"` // allocator policy; "" = --policy
	// SLO: the pema policy's objective and proxy (docs/pema.md).
	SLO *adminapi.SLO `yaml:"slo"`
}

func loadApps(path string) ([]server.AppSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseApps(path, data)
}

func parseApps(path string, data []byte) ([]server.AppSpec, error) {
	if len(data) > 1<<20 {
		return nil, fmt.Errorf("%s: over 1 MiB", path)
	}
	apps, err := spec.ParseAll(filepath.Base(path), data)
	if err == nil {
		out := make([]server.AppSpec, 0, len(apps))
		for _, a := range apps {
			out = append(out, adminapi.FromSpec(a))
		}
		return out, nil
	}
	if old, oerr := parseOldApps(path, data); oerr == nil {
		return old, nil
	}
	// Every problem, one a line (the caller prints them).
	return nil, err
}

// parseOldApps reads the older --apps format.
func parseOldApps(path string, data []byte) ([]server.AppSpec, error) {
	var entries []appEntry
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&entries); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []server.AppSpec
	for i, e := range entries {
		cpu, err := spec.ParseCPU(e.CPU)
		if err != nil {
			return nil, fmt.Errorf("%s: app %d (%s): cpu: %w", path, i+1, e.Name, err)
		}
		mem, err := spec.ParseBytes(e.Memory)
		if err != nil {
			return nil, fmt.Errorf("%s: app %d (%s): memory: %w", path, i+1, e.Name, err)
		}
		a := server.AppSpec{Name: e.Name, CPUCores: cpu, MemoryBytes: mem, Sigma: e.Sigma, Policy: e.Policy, SLO: e.SLO}
		if err := a.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// loadHostApps reads the --host-apps YAML: host id → the apps its
// certificate may register.
func loadHostApps(path string) (map[string][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) > 1<<20 {
		return nil, fmt.Errorf("%s: over 1 MiB", path)
	}
	var m map[string][]string
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w (want host: [app, ...])", path, err)
	}
	for h, apps := range m {
		if h == "" {
			return nil, fmt.Errorf("%s: empty host id", path)
		}
		for _, a := range apps {
			if !adminapi.ValidAppName(a) {
				return nil, fmt.Errorf("%s: host %s: bad app name %q", path, h, a)
			}
		}
	}
	return m, nil
}

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

// credential is the default path of a TLS file. The shipped unit runs as a
// dynamic user that cannot read /etc/escra/controller-key.pem, so systemd
// hands the files over with LoadCredential= into $CREDENTIALS_DIRECTORY;
// where /etc/escra lacked one, the unit's SetCredential= fallback
// (credentialAbsent) stands in, and the /etc/escra path is used so errors
// name the file to create.
func credential(path func(dir string) string) string {
	if d := os.Getenv("CREDENTIALS_DIRECTORY"); d != "" {
		if b, err := os.ReadFile(path(d)); err == nil && strings.TrimSpace(string(b)) != credentialAbsent {
			return path(d)
		}
	}
	return path(auth.DefaultDir)
}

// credentialAbsent is the SetCredential= value of
// packaging/systemd/escra-controller.service.
const credentialAbsent = "absent"

func run(args []string, stderr io.Writer) int {
	cfg := server.DefaultConfig()
	p := allocator.DefaultParams()
	fs := flag.NewFlagSet("escra-controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&cfg.TCPAddr, "listen", cfg.TCPAddr, "TCP address for daemon sessions")
	fs.StringVar(&cfg.UDPAddr, "telemetry-listen", cfg.UDPAddr, "UDP address for telemetry")
	fs.StringVar(&cfg.TelemetryAdvertise, "telemetry-advertise", "", "UDP address daemons send telemetry to, when not --telemetry-listen (a relay or NAT)")
	fs.StringVar(&cfg.AdminAddr, "admin-listen", cfg.AdminAddr, "admin API and /metrics address: HTTPS with client certificates (admin.pem, viewer.pem); plain HTTP under --insecure (empty: off)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-listen", "", "plain-HTTP address serving /metrics only, for Prometheus (keep it on loopback; empty: off)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve /debug/pprof/ on the admin API (admin role only)")
	fs.Float64Var(&p.Upsilon, "upsilon", p.Upsilon, "Υ: fair shares of the unallocated CPU a fully throttled container may take per period")
	fs.Float64Var(&p.Gamma, "gamma", p.Gamma, "γ: scale CPU down when unused runtime exceeds this fraction of the quota")
	fs.Float64Var(&p.Kappa, "kappa", p.Kappa, "κ: fraction of the unused runtime taken away on scale-down")
	fs.IntVar(&p.Window, "window", p.Window, "n: periods in the sliding windows")
	fs.DurationVar(&p.Period, "period", p.Period, "CFS period the allocator decides for")
	floor := time.Duration(p.CPUFloorUs) * time.Microsecond
	fs.DurationVar(&floor, "cpu-floor", floor, "smallest quota per period a container is cut to")
	policyName := fs.String("policy", allocator.PolicyEscra, "default allocator policy of apps that do not name one ("+strings.Join(allocator.PolicyNames(), ", ")+")")
	fs.DurationVar(&p.PeakHalfLife, "peak-half-life", p.PeakHalfLife, "escra policy: a scale-down keeps the quota above a peak usage decaying with this half-life (0: the window's peak only)")
	fs.Float64Var(&p.Headroom, "headroom", p.Headroom, "a CPU scale-down keeps the quota at least this fraction above the window's peak usage (0: the Escra paper's rule exactly)")
	minStep := time.Duration(p.MinStepUs) * time.Microsecond
	fs.DurationVar(&minStep, "min-step", minStep, "smallest quota change worth sending")
	fs.BoolVar(&p.FairShareOnThrottle, "fair-share-on-throttle", p.FairShareOnThrottle, "escra policy: a container throttled below its equal share of the app's CPU that the pool cannot lift to that share takes the rest from members above it (docs/escra-policy.md)")
	fs.IntVar(&p.ReleasePeriods, "release-periods", p.ReleasePeriods, "escra policy: a container throttled beyond what the pool covers takes quota from siblings quiet for this many periods (0: off; docs/escra-policy.md)")
	fs.Float64Var(&p.MemCreditFraction, "mem-credit-fraction", p.MemCreditFraction, "share of an app's unassigned memory lent to hosts as host-local memory credit, split by members: escrad answers an OOM from it without asking (0: off; docs/host-credit.md)")
	fs.Float64Var(&p.LeaseFraction, "lease-fraction", p.LeaseFraction, "share of an app's unallocated CPU lent to hosts as host-local leases, split by members (0: off; docs/host-credit.md)")
	shareFlag := fs.Float64("host-max-share", 1, "most of an app's CPU and memory budget the members of one host may hold together, as a fraction (1: no cap; hosts are scoped to their bound apps either way; docs/security.md)")
	fs.DurationVar(&cfg.ReclaimEvery, "reclaim-every", cfg.ReclaimEvery, "periodic memory reclaim interval (0: off)")
	fs.DurationVar(&cfg.DeadHold, "host-lost-after", cfg.DeadHold, "how long what a silent host's containers may hold stays out of their apps' pools when they do not rejoin; then the host is presumed lost (docs/allocator.md, the partition hold)")
	fs.Var(bytesFlag{&p.SafeMarginBytes}, "safe-margin", "δ: reclaim sets limit = usage + δ")
	fs.Var(bytesFlag{&p.OOMStepBytes}, "oom-step", "memory granted per OOM request")
	fs.DurationVar(&cfg.DaemonDeadAfter, "daemon-dead-after", 0, "end a daemon session after this long without a word from it (heartbeats are 1 s); 0: 3s (raise it only where hosts stall for seconds, e.g. emulated guests)")
	fs.DurationVar(&cfg.RPCTimeout, "rpc-timeout", cfg.RPCTimeout, "deadline for set-limits and reclaim replies")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	appsFile := fs.String("apps", "", "specs (docs/spec.md) of apps to define at start, several per file; containers are not deployed")
	hostAppsFile := fs.String("host-apps", "", "YAML map host id -> apps its daemon may register besides those its certificate binds (a TLS host bound to none registers nothing)")
	fs.IntVar(&cfg.MaxContainersPerHost, "max-containers-per-host", cfg.MaxContainersPerHost, "registrations one daemon session may hold; more are refused (0: no cap)")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", cfg.MaxSessions, "open daemon session connections, handshakes included; more are closed at once (0: no cap)")
	fs.Float64Var(&cfg.SessionMsgRate, "session-msg-rate", cfg.SessionMsgRate, "messages a second one daemon session is read at past its burst of --session-msg-burst (0: no limit)")
	fs.IntVar(&cfg.SessionMsgBurst, "session-msg-burst", cfg.SessionMsgBurst, "messages one daemon session may send at once (its registrations after a connect)")
	fs.Float64Var(&cfg.TelemetryRatePerSource, "telemetry-rate-per-source", cfg.TelemetryRatePerSource, "telemetry datagrams a second taken from one source address, bursts as large (0: no limit)")
	fs.BoolVar(&cfg.TelemetryAnySource, "telemetry-any-source", false, "take a session's telemetry from any address (a relay or NAT between; default: only from the session's own peer address)")
	fs.IntVar(&cfg.EventHistory, "events-history", cfg.EventHistory, "events kept for escractl events --since: this many limit changes and this many others (0: none)")
	fs.StringVar(&cfg.Placement, "placement", "deployer", "deployer placement policy: deployer (spread replicas, then image layers on the host, then least loaded) or one of "+strings.Join(placement.Policies, ", ")+" alone (docs/depsched.md)")
	resolveRegs := fs.String("resolve-registries", "", "comma-separated registries (host:port, plain HTTP) whose manifests the controller reads to resolve images to layers (default: none; images then match by name only)")
	fs.DurationVar(&cfg.ResolveWait, "resolve-wait", 500*time.Millisecond, "how long a deploy waits for an image's first resolution (it goes on in the background)")
	tlsCA := fs.String("tls-ca", credential(auth.CAPath), "CA certificate daemons' certificates must chain to")
	tlsCert := fs.String("tls-cert", credential(func(d string) string { return auth.CertPath(d, "controller") }), "the controller's certificate (escractl certs)")
	tlsKey := fs.String("tls-key", credential(func(d string) string { return auth.KeyPath(d, "controller") }), "the controller's private key")
	tlsDeny, tlsReload := tlsReloadFlags(fs)
	// systemd's StateDirectory=escra sets $STATE_DIRECTORY.
	stateDir := store.DefaultDir
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		stateDir = d
	}
	fs.StringVar(&stateDir, "state-dir", stateDir, "directory of the embedded state store (--store bolt)")
	storeKind := fs.String("store", "bolt", "where apps, budgets, parameters and specs are kept: bolt (a file in --state-dir), none (memory only: lost on restart) or etcd://HOST:PORT[,HOST:PORT...] (shared by several controllers, one elected leader)")
	fs.DurationVar(&cfg.LeaderTTL, "leader-ttl", 2*time.Second, "--store etcd: a leader that cannot renew its lease for this long loses the leadership (whole seconds)")
	fs.StringVar(&cfg.Advertise, "advertise", "", "--store etcd: session address daemons are sent to while this controller leads (default: the --listen address)")
	etcdCA := fs.String("etcd-cacert", "", "--store etcd: CA file etcd's certificate must chain to; set, the controller speaks HTTPS to etcd (etcd --trusted-ca-file/--cert-file)")
	etcdCert := fs.String("etcd-cert", "", "--store etcd: this controller's client certificate for etcd --client-cert-auth (with --etcd-key)")
	etcdKey := fs.String("etcd-key", "", "--store etcd: the key of --etcd-cert")
	insecureStore := fs.Bool("insecure-store", false, "--store etcd: allow plain HTTP to etcd and etcd without auth (anyone who reaches etcd can rewrite every budget)")
	fs.StringVar(&cfg.AdminAdvertise, "admin-advertise", "", "--store etcd: admin address followers redirect to while this controller leads (default: the --admin-listen address)")
	insecure := fs.Bool("insecure", false, "plain TCP and unauthenticated telemetry: anyone who reaches the ports can move limits")
	checkCfg := fs.Bool("check-config", false, "check flags, --apps, --host-apps, TLS files, addresses and --store, print one line and exit: 0 when the controller would start (systemd runs it as ExecStartPre)")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "escra-controller: "+format+"\n", a...)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return 0
		}
		return fail("%v (see --help)", err)
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		fmt.Println("escra-controller", version.Version)
		return 0
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fail("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	p.CPUFloorUs = floor.Microseconds()
	p.MinStepUs = minStep.Microseconds()
	if !(*shareFlag > 0) || *shareFlag > 1 {
		return fail("--host-max-share %v: want a fraction in (0, 1]", *shareFlag)
	}
	if *shareFlag < 1 {
		p.HostMaxShare = *shareFlag
	}
	if err := p.Validate(); err != nil {
		return fail("%v", err)
	}
	if cfg.ReclaimEvery < 0 {
		return fail("--reclaim-every must be >= 0")
	}
	if cfg.DeadHold <= 0 {
		return fail("--host-lost-after must be > 0")
	}
	if cfg.DaemonDeadAfter < 0 {
		return fail("--daemon-dead-after must be >= 0 (0: 3s)")
	}
	if cfg.RPCTimeout <= 0 {
		return fail("--rpc-timeout must be > 0")
	}
	cfg.Params = p
	if _, err := allocator.PolicyByName(*policyName); err != nil {
		return fail("--policy: %v", err)
	}
	if *policyName != allocator.PolicyEscra {
		name := *policyName
		cfg.Policy = func(string) allocator.Policy { pol, _ := allocator.PolicyByName(name); return pol }
	}
	if cfg.EventHistory < 0 || cfg.EventHistory > 1_000_000 {
		return fail("--events-history %d: want 0 to 1000000", cfg.EventHistory)
	}
	if cfg.MaxContainersPerHost < 0 {
		return fail("--max-containers-per-host must be >= 0")
	}
	if cfg.MaxSessions < 0 || !(cfg.SessionMsgRate >= 0) || cfg.SessionMsgBurst < 1 || !(cfg.TelemetryRatePerSource >= 0) {
		return fail("--max-sessions, --session-msg-rate and --telemetry-rate-per-source must be >= 0, --session-msg-burst >= 1")
	}
	if _, ok := placement.DepProfile(cfg.Placement, nil); !ok && cfg.Placement != "deployer" {
		return fail("--placement %q: want deployer or one of %s", cfg.Placement, strings.Join(placement.Policies, ", "))
	}
	for _, r := range strings.Split(*resolveRegs, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.ResolveRegistries = append(cfg.ResolveRegistries, r)
		}
	}
	if *hostAppsFile != "" {
		m, err := loadHostApps(*hostAppsFile)
		if err != nil {
			return fail("--host-apps: %v", err)
		}
		cfg.HostApps = m
	}
	if *appsFile != "" {
		apps, err := loadApps(*appsFile)
		if err != nil {
			// Every problem of the file, one a line.
			for _, l := range strings.Split(err.Error(), "\n") {
				fail("--apps: %s", l)
			}
			return 2
		}
		if data, err := os.ReadFile(*appsFile); err == nil {
			if _, err := spec.ParseAll(*appsFile, data); err != nil {
				fmt.Fprintf(stderr, "escra-controller: warning: --apps %s is in the older format; write specs (docs/spec.md): %s\n",
					*appsFile, strings.SplitN(err.Error(), "\n", 2)[0])
			}
		}
		cfg.Apps = apps
	}
	if !*insecure {
		id, err := auth.LoadIdentity(auth.Files{CA: *tlsCA, Cert: *tlsCert, Key: *tlsKey}, *tlsDeny)
		if err != nil {
			return fail("TLS: %v (create the files with escractl certs, or run with --insecure)", err)
		}
		cfg.Identity, cfg.TLS, cfg.AdminTLS = id, id.ServerConfig(), id.AdminServerConfig()
	} else if *tlsDeny != "" {
		return fail("--tls-deny needs TLS (not --insecure)")
	}
	if *tlsReload < 0 {
		return fail("--tls-reload-every must be >= 0")
	}
	if !strings.HasPrefix(*storeKind, "etcd://") && (*etcdCA != "" || *etcdCert != "" || *etcdKey != "" || *insecureStore) {
		return fail("--etcd-cacert/--etcd-cert/--etcd-key/--insecure-store need --store etcd://…")
	}
	switch *storeKind {
	case "bolt":
		if *checkCfg {
			// Not opened: a running controller holds the file's lock.
			if st, err := os.Stat(stateDir); err == nil && !st.IsDir() {
				return fail("--state-dir %s: not a directory", stateDir)
			}
			break
		}
		st, err := store.OpenBolt(stateDir)
		if err != nil {
			return fail("--store bolt: %v", err)
		}
		defer st.Close()
		cfg.Store = st
	case "none":
	default:
		if !strings.HasPrefix(*storeKind, "etcd://") {
			return fail("--store %q: want bolt, none or etcd://HOST:PORT[,...]", *storeKind)
		}
		if cfg.LeaderTTL < time.Second {
			return fail("--leader-ttl %v: want at least 1s", cfg.LeaderTTL)
		}
		eps, err := store.ParseEtcdURL(*storeKind)
		if err != nil {
			return fail("--store: %v", err)
		}
		if !*insecureStore && (*etcdCA == "" || *etcdCert == "" || *etcdKey == "") {
			return fail("--store etcd:// needs etcd's TLS and a user per controller: --etcd-cacert, --etcd-cert and --etcd-key (the certificate's common name is the controller's etcd user; docs/operator.md), or --insecure-store")
		}
		var etcdTLS *tls.Config
		if *etcdCA != "" || *etcdCert != "" || *etcdKey != "" {
			if etcdTLS, err = store.EtcdTLS(*etcdCA, *etcdCert, *etcdKey); err != nil {
				return fail("--etcd-cacert/--etcd-cert/--etcd-key: %v", err)
			}
		}
		if *checkCfg {
			break // parsed, files read; reaching etcd is the start's business
		}
		st, err := store.OpenEtcd(eps, store.DefaultEtcdPrefix, etcdTLS)
		if err != nil {
			return fail("--store: %v", err)
		}
		defer st.Close()
		if err := checkStoreAuth(st, *insecureStore); err != nil {
			return fail("--store: %v (or --insecure-store)", err)
		}
		cfg.Store, cfg.Elector = st, st
	}
	if *checkCfg {
		if err := checkAddrs(cfg); err != nil {
			return fail("%v", err)
		}
		fmt.Println("escra-controller: configuration ok (store " + storeName(*storeKind, stateDir) + ")")
		return 0
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *insecure {
		cfg.Logger.Warn("running --insecure: daemon sessions are not authenticated, telemetry is not signed and the admin API is plain HTTP without roles; anyone who can reach the ports can change container limits")
	}
	if *insecureStore {
		cfg.Logger.Warn("running --insecure-store: etcd's TLS and auth are not required; anyone who reaches etcd can change every app's budget")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	watchIdentity(ctx, cfg.Identity, *tlsReload, cfg.Logger)
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		return fail("%v", err)
	}
	cfg.Logger.Info("escra-controller ready", "version", version.Version, "sessions", srv.TCPAddr(),
		"telemetry", srv.UDPAddr(), "admin", srv.AdminAddr(), "metrics", srv.MetricsAddr(), "store", storeName(*storeKind, stateDir), "apps", len(cfg.Apps), "tls", cfg.TLS != nil,
		"role", role(srv, cfg.Elector != nil))
	<-ctx.Done()
	srv.Close()
	return 0
}

// checkAddrs checks the listen and advertise addresses (--check-config):
// host:port each, a port number or name, empty where that means off.
func checkAddrs(cfg server.Config) error {
	for _, a := range []struct{ flag, v string }{
		{"listen", cfg.TCPAddr}, {"telemetry-listen", cfg.UDPAddr}, {"telemetry-advertise", cfg.TelemetryAdvertise},
		{"admin-listen", cfg.AdminAddr}, {"metrics-listen", cfg.MetricsAddr}, {"advertise", cfg.Advertise}, {"admin-advertise", cfg.AdminAdvertise},
	} {
		if a.v == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("--%s %q: %v", a.flag, a.v, err)
		} else if _, err := net.LookupPort("tcp", port); err != nil {
			return fmt.Errorf("--%s %q: %v", a.flag, a.v, err)
		}
	}
	return nil
}

func storeName(kind, dir string) string {
	if kind == "bolt" {
		return filepath.Join(dir, store.FileName)
	}
	return kind
}

func role(srv *server.Server, elected bool) string {
	if !elected {
		return "single"
	}
	if ok, _ := srv.Leading(); ok {
		return "leader"
	}
	return "candidate"
}

// checkStoreAuth refuses an etcd that does not enforce RBAC on this
// controller, unless --insecure-store.
func checkStoreAuth(st *store.Etcd, insecure bool) error {
	if insecure {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return st.CheckAuth(ctx)
}
