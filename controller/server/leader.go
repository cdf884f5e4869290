package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/escra-dev/escra/controller/session"
)

// Elector elects one leading controller among several sharing a store
// (store.Etcd). Only the leader holds daemon sessions and takes admin
// writes; the others wait to take over.
type Elector interface {
	// Campaign blocks until this controller leads or ctx ends. term grows
	// with every new leader; lost is closed when the leadership ends.
	Campaign(ctx context.Context, value string, ttl time.Duration) (term uint64, lost <-chan struct{}, err error)
	// Leader is the leader's Campaign value ("" when none is elected).
	Leader(ctx context.Context) (string, error)
}

// Holder is an Elector that can tell from the clock whether its lease is
// still within its deadline (store.Etcd).
type Holder interface{ Holding() bool }

// mayAct is the sessions' write check under an Elector that is a Holder
// (nil: always).
func (s *Server) mayAct() func() bool {
	if h, ok := s.cfg.Elector.(Holder); ok {
		return h.Holding
	}
	return nil
}

// leaderInfo is what a leader publishes: where daemons and operators
// reach it.
type leaderInfo struct {
	Sessions string `json:"sessions"`
	Admin    string `json:"admin,omitempty"`
}

// Leading reports whether this controller leads (always without an
// Elector) and its term.
func (s *Server) Leading() (bool, uint64) { return s.leading.Load(), s.term.Load() }

func (s *Server) advertised() leaderInfo {
	li := leaderInfo{Sessions: s.cfg.Advertise, Admin: s.cfg.AdminAdvertise}
	if li.Sessions == "" {
		li.Sessions = s.TCPAddr()
	}
	if li.Admin == "" {
		li.Admin = s.AdminAddr()
	}
	return li
}

// leader looks up the current leader (zero when none or unknown).
func (s *Server) leader(ctx context.Context) leaderInfo {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var li leaderInfo
	if v, err := s.cfg.Elector.Leader(ctx); err == nil && v != "" {
		_ = json.Unmarshal([]byte(v), &li)
	}
	return li
}

// notLeader is Hello's answer on a follower: the daemon goes to the leader.
func (s *Server) notLeader() error {
	li := s.leader(s.ctx)
	if li.Sessions == s.advertised().Sessions {
		li.Sessions = "" // our own stale key: no leader yet
	}
	return &session.Redirect{Leader: li.Sessions}
}

// leadLoop campaigns, leads until the leadership is lost, and campaigns
// again.
func (s *Server) leadLoop() {
	info, _ := json.Marshal(s.advertised())
	for s.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(s.ctx)
		term, lost, err := s.cfg.Elector.Campaign(ctx, string(info), s.cfg.LeaderTTL)
		if err != nil {
			cancel()
			if s.ctx.Err() != nil {
				return
			}
			s.rl.Warn("campaign", "leader election failed; retrying in 1 s", "err", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if err := s.takeOver(term); err != nil {
			s.log.Error("won the election but could not load the store; stepping down", "term", term, "err", err)
			cancel()
			<-lost
			s.stepDown()
			continue
		}
		select {
		case <-lost:
			s.log.Warn("leadership lost (store lease not renewed): daemon sessions closed, following again", "term", term)
		case <-s.ctx.Done():
		}
		cancel()
		<-lost
		s.stepDown()
	}
}

// takeOver loads the desired state the previous leader stored, then
// accepts sessions.
func (s *Server) takeOver(term uint64) error {
	s.dropApps()
	stored, err := s.loadStore()
	if err != nil {
		return err
	}
	for _, a := range s.cfg.Apps {
		if err := s.DefineApp(a); err != nil {
			return err
		}
	}
	s.rejoinGrace(stored)
	s.term.Store(term)
	s.leading.Store(true)
	s.log.Info("leading: accepting daemon sessions and admin writes", "term", term)
	return nil
}

// stepDown closes every session (their daemons go to the next leader)
// and forgets the live state; the store keeps the desired state.
func (s *Server) stepDown() {
	s.leading.Store(false)
	s.hosts.Range(func(_, v any) bool { v.(*host).sess.Close(); return true })
	s.dropApps()
}

func (s *Server) dropApps() {
	s.mu.Lock()
	for n, a := range s.apps {
		a.Stop()
		delete(s.apps, n)
		delete(s.docs, n)
		delete(s.deployed, n)
	}
	s.mu.Unlock()
}

// followerRedirect sends /v1/ calls made to a follower to the leader's
// admin API (307, the same method and body); with no leader elected it
// answers 503. /metrics stays local.
func (s *Server) followerRedirect(next http.Handler) http.Handler {
	if s.cfg.Elector == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.leading.Load() || !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		li := s.leader(r.Context())
		if li.Admin == "" || li.Admin == s.advertised().Admin {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "this controller is not the leader and no leader is elected yet; retry"})
			return
		}
		scheme := "http"
		if s.cfg.AdminTLS != nil {
			scheme = "https"
		}
		w.Header().Set("Location", scheme+"://"+li.Admin+r.URL.RequestURI())
		writeJSON(w, http.StatusTemporaryRedirect, map[string]string{"error": "not the leader", "leader": li.Admin})
	})
}

func (s *Server) leaderMetrics() {
	s.met.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "escra_controller_leader", Help: "1 while this controller leads (accepts sessions and admin writes)."},
			func() float64 {
				if s.leading.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "escra_controller_term", Help: "Leadership term of the last win (etcd election revision; 0 without election)."},
			func() float64 { return float64(s.term.Load()) }))
}
