package server

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/store"
	"github.com/escra-dev/escra/internal/auth"
)

// Config configures a controller.
type Config struct {
	// DeadHold is how long what the containers of a host whose session
	// ended may hold stays out of the pools when neither they nor their
	// host rejoin (allocator/hold.go): then the host is presumed lost (a
	// host back after that re-enters with its own limits, counted from its
	// registration on). escra-controller --host-lost-after; default 10 min.
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
	// DaemonDeadAfter ends a daemon session silent this long (0: 3 s).
	DaemonDeadAfter time.Duration
	Logger          *slog.Logger
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
	// Identity, when set, is the reloadable files TLS and AdminTLS were
	// made from (auth.Identity): its expiry is exported, and after a reload
	// daemon sessions and admin requests of deny-listed certificates end.
	Identity *auth.Identity
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
	// HostApps binds the hosts it names to the apps listed for them, in
	// addition to the apps their certificates bind (auth.CertApps; "*" is
	// any app). A TLS host registers only apps it is bound to, a plain one
	// any app unless named here (scope.go; escra-controller --host-apps).
	HostApps map[string][]string
	// MaxContainersPerHost caps the registrations of one session (0: no
	// cap), so one host cannot grow the controller's memory without bound.
	MaxContainersPerHost int
	// MaxSessions caps the open session connections, handshakes included
	// (0: no cap; limits.go).
	MaxSessions int
	// SessionMsgRate and SessionMsgBurst pace what one session's daemon
	// sends, in messages a second (0: no limit): past the burst its
	// messages are read no faster, so a flooding host slows itself only.
	SessionMsgRate  float64
	SessionMsgBurst int
	// TelemetryRatePerSource limits the datagrams taken from one source
	// address a second, with bursts as large (0: no limit).
	TelemetryRatePerSource float64
	// TelemetryAnySource accepts a session's datagrams from any address
	// (a relay or NAT between daemons and the controller); by default only
	// from the session's TCP peer address.
	TelemetryAnySource bool
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
		MaxSessions:            10000,
		SessionMsgRate:         2000,
		SessionMsgBurst:        5000,
		TelemetryRatePerSource: 20000,
		EventHistory:           events.DefaultHistory,
		DeadHold:               10 * time.Minute,
		RejoinGrace:            3 * time.Second,
	}
}

// AppSpec defines a Distributed Container (Escra §IV-A).
type AppSpec = adminapi.AppSpec

// Max is one container template's caps (adminapi.Max).
type Max = adminapi.Max
