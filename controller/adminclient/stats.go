package adminclient

import (
	"context"
	"net/http"

	"github.com/escra-dev/escra/controller/adminapi"
)

// Stats reads the controller's own counters: decision and OOM verdict
// latency, telemetry taken in and dropped.
func (c *Client) Stats(ctx context.Context) (adminapi.Stats, error) {
	var st adminapi.Stats
	return st, c.do(ctx, http.MethodGet, "/v1/stats", nil, &st)
}

// ResetStats restarts the decision and OOM verdict latency figures and
// returns the counters as they are after the reset.
func (c *Client) ResetStats(ctx context.Context) (adminapi.Stats, error) {
	var st adminapi.Stats
	return st, c.do(ctx, http.MethodPost, "/v1/stats/reset", nil, &st)
}
