package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/escra-dev/escra/internal/auth"
)

// authorize lets a request through when its caller's role may make it:
// viewers read (GET, except profiles), scalers read and add or remove an
// app's containers (escra-gateway), admins do everything, anyone else
// is refused before the handler runs. Cross-origin browser requests that
// could change something are refused too: a browser holding an operator's
// certificate must not be steered by another site (CSRF).
func (s *Server) authorize(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused"})
	}))
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role := auth.RoleAdmin // plain mode (--insecure): no identities
		if s.cfg.AdminTLS != nil {
			role = auth.ClientRole(r.TLS)
		}
		need := requiredRole(r)
		switch {
		case s.deniedCaller(r) != "":
			s.rl.Warn("admin-denied", "admin API call refused: the client certificate is on the deny-list", "serial", s.deniedCaller(r), "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "client certificate is on the controller's deny-list"})
		case role == "":
			s.rl.Warn("admin-anonymous", "admin API call without a client certificate refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "client certificate required (escractl certs makes admin.pem, viewer.pem and scaler.pem)"})
		case role == auth.RoleAdmin, role == auth.RoleViewer && need == auth.RoleViewer,
			role == auth.RoleScaler && (need == auth.RoleViewer || need == auth.RoleScaler):
			if isWrite(r) {
				s.audit(w, r, role, next)
				return
			}
			next.ServeHTTP(w, r)
		default:
			s.rl.Warn("admin-forbidden", "admin API call refused for the caller's role", "role", role, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf("role %s may not %s %s (needs %s)", role, r.Method, r.URL.Path, need)})
		}
	}))
}

// requiredRole is the least role that may make r.
func requiredRole(r *http.Request) string {
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !strings.HasPrefix(r.URL.Path, "/debug/") {
		return auth.RoleViewer
	}
	if isScale(r) {
		return auth.RoleScaler
	}
	return auth.RoleAdmin
}

// isScale is a request of the scaler role: POST /v1/apps/NAME/containers
// (scale out) or DELETE /v1/apps/NAME/containers/CNAME (scale in), as
// controller/server/scale.go routes them.
func isScale(r *http.Request) bool {
	p := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(p) < 4 || p[0] != "v1" || p[1] != "apps" || p[2] == "" || p[3] != "containers" {
		return false
	}
	switch r.Method {
	case http.MethodPost:
		return len(p) == 4
	case http.MethodDelete:
		return len(p) == 5 && p[4] != ""
	}
	return false
}
