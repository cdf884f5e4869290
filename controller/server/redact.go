package server

import (
	"net/http"
	"slices"

	"github.com/escra-dev/escra/internal/auth"
)

// envRedacted stands for every env value shown to a caller who is not an
// admin: container env carries credentials (database passwords, tokens),
// and a viewer's or scaler's certificate is handed out to read state, not
// secrets. The keys stay, so a viewer still sees what is set.
const envRedacted = "***"

// seesEnv reports whether r's caller may read env values: admins, and
// every caller in plain mode (--insecure), where every caller is admin.
func (s *Server) seesEnv(r *http.Request) bool {
	return s.cfg.AdminTLS == nil || auth.ClientRole(r.TLS) == auth.RoleAdmin
}

// appsFor is apps as r's caller may see them.
func (s *Server) appsFor(r *http.Request, apps []AppState) []AppState {
	if s.seesEnv(r) {
		return apps
	}
	return redactEnv(apps)
}

// redactEnv copies apps with every spec's env values replaced; the
// snapshot's documents are shared, so they are copied, not changed.
func redactEnv(apps []AppState) []AppState {
	out := slices.Clone(apps)
	for i := range out {
		if out[i].Spec == nil {
			continue
		}
		d := *out[i].Spec
		d.Containers = slices.Clone(d.Containers)
		for j := range d.Containers {
			c := &d.Containers[j]
			if len(c.Env) == 0 {
				continue
			}
			env := make(map[string]string, len(c.Env))
			for k := range c.Env {
				env[k] = envRedacted
			}
			c.Env = env
		}
		out[i].Spec = &d
	}
	return out
}
