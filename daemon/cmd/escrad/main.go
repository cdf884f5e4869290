// Command escrad is the per-host Escra agent: it finds containers labelled
// escra.app=APP, streams their per-period CPU telemetry to the controller,
// forwards OOM requests and applies the limits the controller decides.
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
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gopkg.in/yaml.v3"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/daemon/source/bpf"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/version"
	"github.com/escra-dev/escra/internal/wysiwyg"
)

// fileConfig is the YAML config file; flags given on the command line win.
type fileConfig struct {
	DockerHost     string                  `yaml:"docker_host"`
	NoDocker       bool                    `yaml:"no_docker"`
	Controller     string                  `yaml:"controller"`
	Period         string                  `yaml:"period"`
	OOMDeadline    string                  `yaml:"oom_deadline"`
	ControllerDead string                  `yaml:"controller_dead_after"`
	ThrottlePoll   string                  `yaml:"throttle_poll"`
	RestoreAfter   string                  `yaml:"restore_after"`
	DockerSync     string                  `yaml:"docker_sync"`
	Backend        string                  `yaml:"backend"`
	HostID         string                  `yaml:"host_id"`
	LogLevel       string                  `yaml:"log_level"`
	MetricsListen  string                  `yaml:"metrics_listen"`
	Apps           []string                `yaml:"apps"`
	Cgroups        []containers.CgroupSpec `yaml:"cgroups"`
	TLSCA          string                  `yaml:"tls_ca"`
	TLSCert        string                  `yaml:"tls_cert"`
	TLSKey         string                  `yaml:"tls_key"`
	Insecure       bool                    `yaml:"insecure"`
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == cgroupfs.GuardArg {
		cgroupfs.RunGuard(os.Stdin)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == ViewCmd {
		os.Exit(runView(os.Args[2:], os.Stdout, os.Stderr))
	}
	args, restoreOnly := os.Args[1:], false
	if len(args) > 0 && args[0] == RestoreCmd {
		args, restoreOnly = args[1:], true
	}
	if err := run(args, restoreOnly); err != nil {
		fmt.Fprintln(os.Stderr, "escrad:", err)
		os.Exit(2)
	}
}

func run(args []string, restoreOnly bool) error {
	fs := flag.NewFlagSet("escrad", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: escrad [flags]\n       %s\n       %s\n", restoreUsage, viewUsage)
		fs.PrintDefaults()
	}
	var (
		configPath  = fs.String("config", "", "YAML config file (flags override it)")
		dockerHost  = fs.String("docker-host", "", "Docker engine socket, e.g. unix:///var/run/docker.sock (default: DOCKER_HOST or the standard socket)")
		noDocker    = fs.Bool("no-docker", false, "manage only the cgroups listed in the config file")
		controller  = fs.String("controller", "127.0.0.1:7470", "controller TCP address; A,B,... for several controllers sharing an etcd store: tried in turn, following the elected leader")
		period      = fs.Duration("period", 100*time.Millisecond, "telemetry period (CFS period)")
		ctlDead     = fs.Duration("controller-dead-after", 0, "end the controller session after this long without a word from it, and redial; 0: 3s (raise it only on hosts that stall for seconds, e.g. emulated guests)")
		oomDeadline = fs.Duration("oom-deadline", 0, "wait this long for an OOM verdict (the controller round trip included) before letting the kernel OOM killer act; 0: 200ms, on the kernel backend escra.ko's oom_timeout_ms minus 10ms (a longer one than that is refused)")
		dockerSync  = fs.Duration("docker-sync", limits.DefaultReconcileWindow, "bring Docker's view of a container's limits (docker inspect) up to the cgroup at most this often; each docker update runs runc (0: never)")
		restoreAft  = fs.Duration("restore-after", 10*time.Second, "put back the limits Docker knows for every managed container once no controller has been reachable this long (0: never)")
		oomParam    = fs.String("oom-timeout-param", agent.OOMTimeoutParam, "kernel backend: escra.ko's oom_timeout_ms, read at start to fit --oom-deadline inside it")
		thrPoll     = fs.Duration("throttle-poll", 10*time.Millisecond, "cgroupfs: read nr_throttled of every group near its quota (--throttle-hot) this often between periods and report a rise to the controller at once (0: off, also the bpf backend's throttle events)")
		thrNear     = fs.Float64("throttle-near", 0.95, "cgroupfs: also report a group that has used this share of its quota within the CFS period in progress, before it is throttled (0: off)")
		thrWarm     = fs.Duration("throttle-warm", 20*time.Millisecond, "cgroupfs: while no group is near its quota, check the parents' usage this often for one running into it (0: only period records make a group watched)")
		thrHot      = fs.Float64("throttle-hot", 0.8, "cgroupfs: poll only groups whose last period used this share of their quota or was throttled (0: every group with a quota; an idle host then wakes every --throttle-poll)")
		backend     = fs.String("backend", "auto", "telemetry/OOM backend: auto (kernel, else bpf, else cgroupfs), kernel (escra.ko), bpf (stock kernel with BTF) or cgroupfs")
		hostID      = fs.String("host-id", "", "host id reported to the controller (default: hostname)")
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
		metrics     = fs.String("metrics-listen", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9470)")
		apps        = fs.String("apps", "", "comma-separated escra.app values to manage (default: every labelled container)")
		parentCheck = fs.Bool("idle-parent-check", true, "cgroupfs: skip a period's per-container reads when the containers' common parent cgroup did not run")
		procs       = fs.Int("procs", 1, "Go scheduler Ps (GOMAXPROCS) for escrad's own work; each wake-up of an idle daemon costs more with more Ps, and one keeps up with a period's sampling (0: one per CPU; the GOMAXPROCS variable wins when this flag is not given)")
		cpuProfile  = fs.String("cpuprofile", "", "write a CPU profile to this file until exit (diagnostics)")
		showVersion = fs.Bool("version", false, "print the version and exit")
		checkCfg    = fs.Bool("check-config", false, "check the config file and flags (TLS files, addresses, cgroups, apps), print one line and exit: 0 when escrad would start (systemd runs it as ExecStartPre)")
		tlsCA       = fs.String("tls-ca", auth.CAPath(auth.DefaultDir), "CA certificate the controller's certificate must chain to")
		tlsCert     = fs.String("tls-cert", "", "this host's certificate (default /etc/escra/HOST.pem, HOST = --host-id)")
		tlsKey      = fs.String("tls-key", "", "this host's private key (default /etc/escra/HOST-key.pem)")
		tlsServer   = fs.String("tls-server-name", auth.ControllerName, "name the controller's certificate must carry")
		tlsReload   = fs.Duration("tls-reload-every", 10*time.Second, "how often the TLS files are checked for changes and reloaded for the next connection; SIGHUP reloads at once (0: on SIGHUP only)")
		noGuard     = fs.Bool("no-oom-guard", false, "do not start the OOM guard process (it re-enables the OOM killer of trapped containers if escrad dies)")
		oomState    = fs.String("oom-state", "", "state file listing every group whose OOM killer escrad disabled, written before arming (default /run/escra/escrad-HOST.oom-armed)")
		cpuPlace    = fs.String("cpu-placement", "hard", "host CPU placement for escra.cpu=wysiwyg containers (WYSIWYG containers): hard (refuse a quota that cannot be WYSIWYG), besteffort, or off")
		viewDir     = fs.String("view-dir", agent.DefaultViewDir, "directory of per-container CPU views: NAME/online follows the cpuset of container NAME (bind-mount it on /sys/devices/system/cpu/online)")
		cpuProfiles = fs.String("cpu-profiles", wysiwyg.DefaultProfileDir, "verdicts of escractl profile --record, one file per image: an escra.cpu=auto container is wysiwyg if its image's says so, else shared")
		lockDir     = fs.String("lock-dir", defaultLockDir, "directory of the per-engine lock files (one escrad per Docker engine)")
		insecure    = fs.Bool("insecure", false, "plain TCP and unsigned telemetry to the controller: anyone on the path can forge or read it")
		pullRegs    = fs.String("pull-registries", "", "comma-separated registries (host:port as in image names, e.g. 127.0.0.1:5000) the deployer's creates may pull a missing image from (default: never pull)")
		cfsBurst    = fs.Float64("cfs-burst", 0, "keep each managed container's CFS burst (cpu.cfs_burst_us, Linux >= 5.14) at this share of its quota, in [0, 1]: runtime left unused carries over to a period with more arrivals, at the price of using up to quota+burst in one period (0: leave bursts alone)")
		imageBudget = fs.Int64("image-budget", 0, "keep the engine's image store under this many bytes by removing the least recently used images no container uses (0: no budget)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		fmt.Println("escrad", version.Version)
		return nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var fc fileConfig
	if *configPath != "" {
		b, err := os.ReadFile(*configPath)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
			// yaml.v3 puts each problem on its own line: keep one line.
			return fmt.Errorf("config %s: %s", *configPath, strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", ";")), " "))
		}
	}
	str := func(flagVal *string, name, fileVal string) {
		if !set[name] && fileVal != "" {
			*flagVal = fileVal
		}
	}
	str(dockerHost, "docker-host", fc.DockerHost)
	str(controller, "controller", fc.Controller)
	str(backend, "backend", fc.Backend)
	str(hostID, "host-id", fc.HostID)
	str(logLevel, "log-level", fc.LogLevel)
	str(metrics, "metrics-listen", fc.MetricsListen)
	str(tlsCA, "tls-ca", fc.TLSCA)
	str(tlsCert, "tls-cert", fc.TLSCert)
	str(tlsKey, "tls-key", fc.TLSKey)
	if !set["insecure"] && fc.Insecure {
		*insecure = true
	}
	if !set["no-docker"] && fc.NoDocker {
		*noDocker = true
	}
	for _, d := range []struct {
		dst  *time.Duration
		name string
		val  string
	}{{period, "period", fc.Period}, {oomDeadline, "oom-deadline", fc.OOMDeadline}, {ctlDead, "controller-dead-after", fc.ControllerDead}, {thrPoll, "throttle-poll", fc.ThrottlePoll}, {restoreAft, "restore-after", fc.RestoreAfter}, {dockerSync, "docker-sync", fc.DockerSync}} {
		if !set[d.name] && d.val != "" {
			v, err := time.ParseDuration(d.val)
			if err != nil {
				return fmt.Errorf("config: %s: %w", d.name, err)
			}
			*d.dst = v
		}
	}
	if *procs < 0 {
		return fmt.Errorf("--procs %d: must be >= 0 (0: one per CPU)", *procs)
	}
	if *ctlDead < 0 {
		return fmt.Errorf("--controller-dead-after %v: must be >= 0 (0: 3s)", *ctlDead)
	}
	if *period < time.Millisecond || *period > 10*time.Second {
		return fmt.Errorf("--period %v out of range [1ms, 10s]", *period)
	}
	if *thrPoll != 0 && (*thrPoll < 100*time.Microsecond || *thrPoll >= *period) {
		return fmt.Errorf("--throttle-poll %v out of range: want 0 (off) or [100µs, --period %v)", *thrPoll, *period)
	}
	if *dockerSync < 0 {
		return fmt.Errorf("--docker-sync %v out of range: want 0 (never) or a positive interval", *dockerSync)
	}
	if *thrNear < 0 || *thrNear > 1 {
		return fmt.Errorf("--throttle-near %v out of range: want 0 (off) or (0, 1]", *thrNear)
	}
	if *thrWarm < 0 || *thrWarm >= *period {
		return fmt.Errorf("--throttle-warm %v out of range: want 0 (off) or below --period %v", *thrWarm, *period)
	}
	if !(*thrHot >= 0 && *thrHot <= 1) {
		return fmt.Errorf("--throttle-hot %v out of range: want 0 (poll every group) or (0, 1]", *thrHot)
	}
	if !(*cfsBurst >= 0 && *cfsBurst <= 1) {
		return fmt.Errorf("--cfs-burst %v out of range [0, 1]: the kernel refuses a burst above the quota", *cfsBurst)
	}
	if *restoreAft < 0 {
		return fmt.Errorf("--restore-after %v: want 0 (never) or a positive duration", *restoreAft)
	}
	if *oomDeadline < 0 || *oomDeadline > time.Minute {
		return fmt.Errorf("--oom-deadline %v out of range: want 0 (fit to the backend) or (0, 1m]", *oomDeadline)
	}
	// One OOM deadline with escra.ko's, checked before anything starts:
	// --backend kernel, or auto with the module loaded.
	if _, err := os.Stat(*oomParam); *backend == agent.BackendKernel || (*backend == agent.BackendAuto || *backend == "") && err == nil {
		if _, err := agent.FitOOMDeadline(*oomDeadline, *oomParam); err != nil {
			return err
		}
	}
	for _, c := range strings.Split(*controller, ",") {
		if _, _, err := net.SplitHostPort(c); err != nil {
			return fmt.Errorf("--controller %q: %w", c, err)
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if *hostID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--host-id not given and no hostname: %w", err)
		}
		*hostID = h
	}
	if *oomState == "" {
		*oomState = defaultOOMState(*hostID)
	}
	if *checkCfg {
		if err := checkConfig(checkInput{
			Insecure: *insecure, TLSCA: *tlsCA, TLSCert: *tlsCert, TLSKey: *tlsKey, TLSServer: *tlsServer, HostID: *hostID,
			Metrics: *metrics, NoDocker: *noDocker, DockerHost: *dockerHost,
			Agent: agent.Config{Backend: *backend, Cgroups: fc.Cgroups, Apps: appList(set["apps"], *apps, fc.Apps), CFSBurst: *cfsBurst},
		}); err != nil {
			return err
		}
		name := *configPath
		if name == "" {
			name = "(flags only)"
		}
		fmt.Printf("escrad: configuration %s ok\n", name)
		return nil
	}
	// One escrad per engine: a second one must not even restore (it would
	// lift the first one's OOM traps), so this comes first.
	if !restoreOnly {
		lk, err := lockEngine(*lockDir, engineKey(*dockerHost, *noDocker, *hostID))
		if err != nil {
			return err
		}
		defer lk.Close()
	}
	// Before anything else can fail or arm: groups a previous escrad armed
	// may have lost their watcher and guard together (docs/security.md).
	src := restoreSources{State: *oomState, Docker: !*noDocker, DockerHost: *dockerHost,
		Apps: appList(set["apps"], *apps, fc.Apps), Cgroups: fc.Cgroups}
	if restoreOnly {
		if n := restoreOOM(log, src, 0); n > 0 {
			return fmt.Errorf("%s: %d groups not restored", RestoreCmd, n)
		}
		return nil
	}
	restoreOOM(log, src, time.Second)
	if set["procs"] || os.Getenv("GOMAXPROCS") == "" {
		n := *procs
		if n == 0 {
			n = runtime.NumCPU()
		}
		runtime.GOMAXPROCS(n)
	}
	var tc *tls.Config
	var id *auth.Identity
	if *insecure {
		log.Warn("running --insecure: the controller is not authenticated and telemetry is not signed; anyone on the path can forge limits and telemetry")
	} else {
		if *tlsCert == "" {
			*tlsCert = auth.CertPath(auth.DefaultDir, *hostID)
		}
		if *tlsKey == "" {
			*tlsKey = auth.KeyPath(auth.DefaultDir, *hostID)
		}
		var err error
		if id, err = auth.LoadIdentity(auth.Files{CA: *tlsCA, Cert: *tlsCert, Key: *tlsKey}, ""); err != nil {
			return fmt.Errorf("TLS: %v (create the files with escractl certs --hosts %s, or run with --insecure)", err, *hostID)
		}
		tc = id.ClientConfig(*tlsServer)
	}
	if *tlsReload < 0 {
		return fmt.Errorf("--tls-reload-every %v: want >= 0", *tlsReload)
	}

	cfg := agent.Config{
		HostID: *hostID, Controller: *controller, Period: *period, OOMDeadline: *oomDeadline, ControllerDead: *ctlDead, OOMTimeoutParam: *oomParam,
		// --backend auto/kernel use escra.ko when its genetlink family exists;
		// auto/bpf then the CO-RE program when the kernel has BTF.
		Backend: *backend, KernelSource: kmod.NewSource, BPFSource: bpf.NewSource, Cgroups: fc.Cgroups, Apps: fc.Apps, Log: log,
		NoParentShortcut: !*parentCheck, TLS: tc, Identity: id, ThrottlePoll: *thrPoll, ThrottleNear: nearOrOff(*thrNear), ThrottleHot: nearOrOff(*thrHot), ThrottleWarm: warmOrOff(*thrWarm),
		RestoreAfter: *restoreAft, DockerSync: syncOrOff(*dockerSync), CPUPlacement: *cpuPlace, ViewDir: *viewDir, CPUProfileDir: *cpuProfiles, ImageBudget: *imageBudget,
		CFSBurst: *cfsBurst,
	}
	if *imageBudget < 0 {
		return fmt.Errorf("--image-budget %d: want bytes >= 0", *imageBudget)
	}
	for _, r := range strings.Split(*pullRegs, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.PullRegistries = append(cfg.PullRegistries, r)
		}
	}
	cfg.Apps = src.Apps
	if !*noDocker {
		cli, err := containers.NewDockerClient(*dockerHost)
		if err != nil {
			return fmt.Errorf("--docker-host %q: %w", *dockerHost, err)
		}
		defer cli.Close()
		cfg.Docker = cli
	}
	g := cgroupfs.NewRecorder()
	if !*noGuard {
		// The guard clears oom_kill_disable of every trapped group when
		// escrad is gone, even by SIGKILL (docs/daemon.md).
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("oom guard: %w", err)
		}
		if g, err = cgroupfs.StartGuard(exe); err != nil {
			return err
		}
	}
	defer g.Close()
	// The state file covers escrad and the guard killed together; without
	// it the guard and the labelled-container restore still work.
	g.Report(func(err error) { log.Error("oom state file not written", "err", err) },
		func(oldPid, newPid int, err error) {
			if err != nil {
				log.Error("oom guard died and could not be restarted; retrying every second", "old_pid", oldPid, "err", err)
				return
			}
			log.Warn("oom guard died alone; restarted it with the armed set", "old_pid", oldPid, "oom_guard_pid", newPid)
		})
	if err := g.RecordIn(*oomState); err != nil {
		log.Error("oom state file not written; escrad and its guard killed together would leave trapped groups until escrad restore-oom", "err", err)
	}
	cgroupfs.SetGuard(g)
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	engine := "none"
	if cfg.Docker != nil {
		engine = cfg.Docker.DaemonHost()
	}
	log.Info("escrad starting", "version", version.Version, "backend", a.Backend(), "cgroup", a.CgroupVersion().String(),
		"engine", engine, "controller", *controller, "period", *period, "throttle_poll", *thrPoll, "oom_deadline", a.OOMDeadline(), "tls", tc != nil,
		"oom_guard_pid", g.Pid(), "oom_state", *oomState, "procs", runtime.GOMAXPROCS(0))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if id != nil {
		// New files serve the next connection; the open session keeps its own.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go id.Watch(ctx, *tlsReload, hup, log)
	}
	if *metrics != "" {
		ln, err := net.Listen("tcp", *metrics)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := http.NewServeMux()
		// A collector that fails (a container's group gone mid-scrape)
		// must not take go_goroutines and the rest down with it: serve
		// what was gathered and log the error.
		mux.Handle("/metrics", promhttp.HandlerFor(a.Registry(), promhttp.HandlerOpts{
			ErrorHandling: promhttp.ContinueOnError, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	go notifySystemd(ctx, a, log)
	return a.Run(ctx)
}

// nearOrOff maps the flag's 0 (off) to the agent's "off" (< 0); the
// agent's 0 means the default.
// syncOrOff maps --docker-sync 0 (never) to agent.Config's "off" (< 0).
func syncOrOff(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func nearOrOff(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}

// warmOrOff maps --throttle-warm 0 (off) to the agent's "off" (< 0).
func warmOrOff(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
