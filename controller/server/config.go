package server

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/store"
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
	// (the comparisons of dependency-aware scheduling; escra-controller
	// --placement).
	Placement string
	// ResolveRegistries are the registries (host:port) the controller may
	// read manifests from to resolve an image to its layers
	// (dependency-aware scheduling §5.2); others resolve to their
	// normalised name only.
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

// AppSpec defines a Distributed Container (Escra §IV-A).
type AppSpec = adminapi.AppSpec

// Max is one container template's caps (adminapi.Max).
type Max = adminapi.Max
