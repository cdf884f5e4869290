package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Horizontal scaling of a deployed app (Mu's autoscaler):
// add replicas to an app that already runs, or remove one, through the
// same placement and escrad RPCs as Deploy. Unlike Deploy these do not
// rewrite the app's stored desired state: replicas an autoscaler adds are
// its own to take away, and after a controller restart the autoscaler
// scales again from what it finds.

// ScaleOut places and creates more containers for a defined app; a failure
// removes only the containers this call created.
func (s *Server) ScaleOut(ctx context.Context, app string, cs []DeployContainer) ([]Placed, error) {
	if !s.hasApp(app) {
		return nil, fmt.Errorf("%w %q: define its budget first", ErrUnknownApp, app)
	}
	if len(cs) == 0 {
		return nil, errors.New("no containers to add")
	}
	plan, err := s.place(app, cs)
	if err != nil {
		return nil, err
	}
	placed, err := s.createPlanned(ctx, app, plan)
	if err != nil {
		// Undo only what this call made.
		rctx, cancel := context.WithTimeout(context.Background(), deployTimeout)
		defer cancel()
		for i, p := range plan {
			if placed[i].ContainerID != "" {
				call(rctx, p.host.sess, &pb.Envelope{Body: &pb.Envelope_RemoveContainers{RemoveContainers: &pb.RemoveContainers{
					App: app, ContainerIds: []string{placed[i].ContainerID}}}})
			}
		}
		return nil, firstLine(err)
	}
	s.log.Info("app scaled out", "app", app, "added", len(placed))
	return placed, nil
}

// ScaleIn removes one container of app by its name or container id and
// waits (briefly) for it to leave the app.
func (s *Server) ScaleIn(ctx context.Context, app, name string) error {
	if !s.hasApp(app) {
		return fmt.Errorf("%w %q", ErrUnknownApp, app)
	}
	var target *ContainerState
	for _, c := range s.members(app) {
		if c.Name == name || c.ContainerID == name || "/"+name == c.Name {
			target = &c
			break
		}
	}
	if target == nil {
		return fmt.Errorf("app %s has no container %q", app, name)
	}
	var h *host
	s.hosts.Range(func(_, v any) bool {
		if hh := v.(*host); hh.id == target.SessionID {
			h = hh
			return false
		}
		return true
	})
	if h == nil {
		return fmt.Errorf("container %s: its host is not connected", name)
	}
	if _, err := call(ctx, h.sess, &pb.Envelope{Body: &pb.Envelope_RemoveContainers{RemoveContainers: &pb.RemoveContainers{
		App: app, ContainerIds: []string{target.ContainerID}}}}); err != nil {
		return fmt.Errorf("container %s on host %s: %w", name, h.hello.GetHostId(), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		gone := true
		for _, c := range s.members(app) {
			if c.ContainerID == target.ContainerID {
				gone = false
			}
		}
		if gone {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.log.Info("app scaled in", "app", app, "removed", name)
	return nil
}

// scaleRoutes adds POST /v1/apps/{name}/containers (body: DeployRequest)
// and DELETE /v1/apps/{name}/containers/{cname}.
func (s *Server) scaleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/apps/{name}/containers", func(w http.ResponseWriter, r *http.Request) {
		var req DeployRequest
		if err := decodeStrict(r, &req); err != nil {
			writeJSON(w, 400, map[string]string{"error": "bad scale request: " + err.Error()})
			return
		}
		placed, err := s.ScaleOut(r.Context(), r.PathValue("name"), req.Containers)
		switch {
		case errors.Is(err, ErrUnknownApp):
			writeJSON(w, 404, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, 409, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, 200, adminapi.DeployResponse{Containers: placed})
		}
	})
	mux.HandleFunc("DELETE /v1/apps/{name}/containers/{cname}", func(w http.ResponseWriter, r *http.Request) {
		err := s.ScaleIn(r.Context(), r.PathValue("name"), r.PathValue("cname"))
		switch {
		case errors.Is(err, ErrUnknownApp):
			writeJSON(w, 404, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, 409, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, 200, map[string]string{"removed": r.PathValue("cname")})
		}
	})
}

func decodeStrict(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
