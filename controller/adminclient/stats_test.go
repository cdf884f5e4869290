package adminclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/escra-dev/escra/controller/adminapi"
)

func TestStatsAndResetStats(t *testing.T) {
	var resets int
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(adminapi.Stats{Decisions: 7, DecisionLatencyP99Us: 420, TelemetryStats: 9, Dropped: map[string]uint64{"bad_tag": 2}})
	})
	mux.HandleFunc("POST /v1/stats/reset", func(w http.ResponseWriter, r *http.Request) {
		resets++
		json.NewEncoder(w).Encode(adminapi.Stats{TelemetryStats: 9})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Decisions != 7 || st.DecisionLatencyP99Us != 420 || st.TelemetryStats != 9 || st.Dropped["bad_tag"] != 2 {
		t.Errorf("stats: %+v", st)
	}
	st, err = c.ResetStats(ctx)
	if err != nil || resets != 1 || st.Decisions != 0 || st.TelemetryStats != 9 {
		t.Errorf("reset: %+v, %v, %d resets", st, err, resets)
	}
}

func TestStatsReportsTheControllersError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error": "admin role required"}`, http.StatusForbidden)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stats(context.Background())
	if ae, ok := err.(*APIError); !ok || ae.Status != http.StatusForbidden {
		t.Fatalf("got %v, want a 403 APIError", err)
	}
}
