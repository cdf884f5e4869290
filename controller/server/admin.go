package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/internal/version"
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/apps", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, s.appsFor(r, s.Snapshot().Apps))
	})
	mux.HandleFunc("GET /v1/containers", func(w http.ResponseWriter, r *http.Request) {
		cs := s.Snapshot().Containers
		if a := r.URL.Query().Get("app"); a != "" {
			out := cs[:0]
			for _, c := range cs {
				if c.App == a {
					out = append(out, c)
				}
			}
			cs = out
		}
		writeJSON(w, 200, cs)
	})
	mux.HandleFunc("GET /v1/apps/{name}/pema", func(w http.ResponseWriter, r *http.Request) {
		l := s.PEMALoop(r.PathValue("name"))
		if l == nil {
			writeJSON(w, 404, map[string]string{"error": "app has no pema policy"})
			return
		}
		writeJSON(w, 200, l.Records())
	})
	mux.HandleFunc("GET /v1/hosts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, s.Snapshot().Hosts)
	})
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, r *http.Request) {
		st := s.Snapshot()
		st.Apps = s.appsFor(r, st.Apps)
		writeJSON(w, 200, st)
	})
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, adminapi.Version{Version: version.Version, Go: runtime.Version()})
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, s.Stats())
	})
	mux.HandleFunc("POST /v1/stats/reset", func(w http.ResponseWriter, r *http.Request) {
		s.decLat.Reset()
		s.oomLat.Reset()
		writeJSON(w, 200, s.Stats())
	})
	mux.HandleFunc("PUT /v1/apps/{name}", func(w http.ResponseWriter, r *http.Request) {
		var spec AppSpec
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			writeJSON(w, 400, map[string]string{"error": "bad app spec: " + err.Error()})
			return
		}
		if spec.Name == "" {
			spec.Name = r.PathValue("name")
		}
		if spec.Name != r.PathValue("name") {
			writeJSON(w, 400, map[string]string{"error": "name in body differs from the path"})
			return
		}
		if dryRun(r.URL.Query().Get("dryRun")) {
			a, err := s.CheckApp(spec)
			if err != nil {
				writeJSON(w, 400, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, 200, a)
			return
		}
		if err := s.DefineApp(spec); err != nil {
			writeJSON(w, storeStatus(err, 400), map[string]string{"error": err.Error()})
			return
		}
		for _, a := range s.Snapshot().Apps {
			if a.Name == spec.Name {
				writeJSON(w, 200, a)
				return
			}
		}
		writeJSON(w, 200, spec)
	})
	// The Application Deployer (Escra §IV-A): place and create the
	// app's containers; all or nothing.
	mux.HandleFunc("POST /v1/apps/{name}/deploy", func(w http.ResponseWriter, r *http.Request) {
		var req DeployRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, 400, map[string]string{"error": "bad deploy request: " + err.Error()})
			return
		}
		placed, roll, err := s.DeployOrRollout(r.Context(), r.PathValue("name"), req)
		switch {
		case errors.Is(err, ErrUnknownApp):
			writeJSON(w, 404, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, storeStatus(err, 409), map[string]string{"error": err.Error()})
		default:
			writeJSON(w, 200, adminapi.DeployResponse{Containers: placed, Rollout: roll})
		}
	})
	s.scaleRoutes(mux) // Mu: an autoscaler adds and removes replicas
	mux.HandleFunc("DELETE /v1/apps/{name}", func(w http.ResponseWriter, r *http.Request) {
		if dryRun(r.URL.Query().Get("dryRun")) {
			for _, a := range s.Snapshot().Apps {
				if a.Name == r.PathValue("name") {
					writeJSON(w, 200, map[string]any{"name": a.Name, "containers_removed": a.Members, "dry_run": true})
					return
				}
			}
			writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("unknown app %q", r.PathValue("name"))})
			return
		}
		n, err := s.RemoveApp(r.Context(), r.PathValue("name"))
		switch {
		case errors.Is(err, ErrUnknownApp):
			writeJSON(w, 404, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, storeStatus(err, 502), map[string]string{"error": err.Error()})
		default:
			writeJSON(w, 200, map[string]any{"name": r.PathValue("name"), "containers_removed": n})
		}
	})
	// Server-sent events: limit changes, OOM verdicts (with reasons),
	// reclaims, joins and leaves.
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		fl, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "streaming unsupported", 500)
			return
		}
		// ?since=RFC3339 time or a duration back from now: replay the
		// kept events first; ?follow=false ends after them.
		q := r.URL.Query()
		var since time.Time
		if v := q.Get("since"); v != "" {
			if d, err := time.ParseDuration(v); err == nil && d >= 0 {
				since = time.Now().Add(-d)
			} else if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				since = t
			} else {
				writeJSON(w, 400, map[string]string{"error": fmt.Sprintf("since %q: want a duration (5m) or an RFC 3339 time", v)})
				return
			}
		}
		follow := q.Get("follow") != "false" && q.Get("follow") != "0"
		past, ch, cancel := s.hub.SubscribeSince(q.Get("app"), since)
		defer cancel()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(200)
		for _, e := range past {
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Kind, b)
		}
		fl.Flush()
		if !follow {
			return
		}
		ping := time.NewTicker(15 * time.Second)
		defer ping.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-s.ctx.Done():
				return
			case <-ping.C:
				io.WriteString(w, ": ping\n\n")
			case e := <-ch:
				b, _ := json.Marshal(e)
				fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Kind, b)
			}
			fl.Flush()
		}
	})
	// Profiles for operators chasing controller CPU: only when asked
	// (--pprof), and only for admins (authorize).
	if s.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	}
	mux.Handle("GET /metrics", s.metricsHandler())
	return s.authorize(s.followerRedirect(mux))
}
