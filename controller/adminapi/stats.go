package adminapi

// Stats are the controller's own counters (GET /v1/stats, POST
// /v1/stats/reset): decision and OOM verdict latency and the telemetry it
// took in, so a benchmark or an operator sees whether it keeps up.
type Stats struct {
	DecisionLatencyP50Us  int64             `json:"decision_latency_p50_us"`
	DecisionLatencyP99Us  int64             `json:"decision_latency_p99_us"`
	DecisionLatencyMeanUs float64           `json:"decision_latency_mean_us"`
	Decisions             uint64            `json:"decisions_sent"`
	OOMVerdictP50Us       int64             `json:"oom_verdict_p50_us"`
	OOMVerdictP99Us       int64             `json:"oom_verdict_p99_us"`
	OOMVerdicts           uint64            `json:"oom_verdicts"`
	TelemetryDatagrams    uint64            `json:"telemetry_datagrams"`
	TelemetryStats        uint64            `json:"telemetry_stats"`
	TelemetryBytes        uint64            `json:"telemetry_bytes"`
	Dropped               map[string]uint64 `json:"dropped"`
}
