package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/spec"
)

// isWrite is a request that may change something.
func isWrite(r *http.Request) bool {
	return r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
}

// audit serves an authorized admin write and logs it in one line at info:
// who (the client certificate's name and serial, its role), what (method,
// path, the object), the answer's status, and the object before → after,
// so an operator's change can be told from another's and undone.
func (s *Server) audit(w http.ResponseWriter, r *http.Request, role string, next http.Handler) {
	object, app := auditObject(r.URL.Path)
	before := s.appSummary(app)
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	t0 := time.Now()
	next.ServeHTTP(rec, r)
	user, serial := caller(r)
	s.log.Info("admin write", "user", user, "role", role, "serial", serial, "method", r.Method, "path", r.URL.RequestURI(),
		"object", object, "status", rec.code, "before", before, "after", s.appSummary(app), "remote", r.RemoteAddr,
		"ms", time.Since(t0).Milliseconds())
}

// auditObject is the object a write path names (app/NAME, with what
// follows it) and the app it belongs to ("" when none).
func auditObject(path string) (object, app string) {
	p := strings.Split(strings.Trim(path, "/"), "/")
	if len(p) >= 3 && p[0] == "v1" && p[1] == "apps" && p[2] != "" {
		return "app/" + strings.Join(p[2:], "/"), p[2]
	}
	return strings.TrimPrefix(strings.Trim(path, "/"), "v1/"), ""
}

// appSummary is an app's budget, policy and members in one short field:
// "absent" when no such app runs, "-" for writes that name none.
func (s *Server) appSummary(name string) string {
	if name == "" {
		return "-"
	}
	s.mu.RLock()
	a := s.apps[name]
	s.mu.RUnlock()
	if a == nil {
		return "absent"
	}
	st := a.Snapshot()
	mode := spec.ModeEnforce
	if st.Recommend {
		mode = spec.ModeRecommend
	}
	out := fmt.Sprintf("cpu=%g memory=%s sigma=%g policy=%s mode=%s members=%d", st.Budget.CPUCores, spec.FormatBytes(st.Budget.MemoryBytes),
		st.Budget.Sigma, st.Policy, mode, len(st.Members))
	if st.Auto {
		out += " auto"
	}
	return out
}

// statusRecorder keeps the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
