package main

import (
	"encoding/json"
	"io"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
)

// topFrame is one frame of top -o json: what the table shows, in base
// units (cores, bytes, per second), for scripts and dashboards.
type topFrame struct {
	Time       time.Time      `json:"time"`
	Controller string         `json:"controller"`
	Containers []topContainer `json:"containers"`
	Apps       []topApp       `json:"apps"`
}

type topContainer struct {
	Name             string   `json:"name"`
	ContainerID      string   `json:"container_id"`
	App              string   `json:"app"`
	Host             string   `json:"host_id"`
	CPULimitCores    float64  `json:"cpu_limit_cores"`
	CPUUsedCores     float64  `json:"cpu_used_cores"`
	CPUSlackCores    float64  `json:"cpu_slack_cores"`
	ThrottledPerSec  *float64 `json:"throttled_periods_per_second"` // null in the first frame
	MemoryLimitBytes int64    `json:"memory_limit_bytes"`
	MemoryUsedBytes  int64    `json:"memory_used_bytes"`
	MemorySlackBytes int64    `json:"memory_slack_bytes"`
	OOMGrants        uint64   `json:"oom_grants"`
	OOMDenials       uint64   `json:"oom_denials"`
	ThrottledPeriods uint64   `json:"throttled_periods"`
	CPUPeriodUs      int64    `json:"cpu_period_us"`
}

type topApp struct {
	Name                 string  `json:"name"`
	CPULimitCores        float64 `json:"cpu_limit_cores"`
	CPUAllocatedCores    float64 `json:"cpu_allocated_cores"`
	CPUUsedCores         float64 `json:"cpu_used_cores"`
	CPUSlackCores        float64 `json:"cpu_slack_cores"`
	MemoryLimitBytes     int64   `json:"memory_limit_bytes"`
	MemoryAllocatedBytes int64   `json:"memory_allocated_bytes"`
	MemoryUsedBytes      int64   `json:"memory_used_bytes"`
	OOMGrants            uint64  `json:"oom_grants"`
	OOMDenials           uint64  `json:"oom_denials"`
}

// frameJSON writes one frame as a JSON object on one line (top -o json
// without --once streams one a frame).
func (st *topState) frameJSON(e *env, c *adminclient.Client, app string, w io.Writer) error {
	apps, cs, err := topFetch(e, c, app)
	if err != nil {
		return err
	}
	now := time.Now()
	f := topFrame{Time: now, Controller: c.URL(), Containers: []topContainer{}, Apps: []topApp{}}
	dt := now.Sub(st.lastTime).Seconds()
	next := make(map[string]uint64, len(cs))
	for _, ct := range cs {
		key := ct.HostID + "/" + ct.ContainerID
		next[key] = ct.ThrottledPeriods
		tc := topContainer{Name: ct.Name, ContainerID: ct.ContainerID, App: ct.App, Host: ct.HostID,
			CPULimitCores: ct.CPULimitCores(), CPUUsedCores: ct.CPUUsageCores(), CPUSlackCores: ct.CPULimitCores() - ct.CPUUsageCores(),
			MemoryLimitBytes: ct.MemoryLimitBytes, MemoryUsedBytes: ct.MemoryUsageBytes, MemorySlackBytes: ct.MemoryLimitBytes - ct.MemoryUsageBytes,
			OOMGrants: ct.OOMGrants, OOMDenials: ct.OOMDenials, ThrottledPeriods: ct.ThrottledPeriods, CPUPeriodUs: ct.CPUPeriodUs}
		if prev, ok := st.last[key]; ok && dt > 0 && ct.ThrottledPeriods >= prev {
			r := float64(ct.ThrottledPeriods-prev) / dt
			tc.ThrottledPerSec = &r
		}
		f.Containers = append(f.Containers, tc)
	}
	st.last, st.lastTime = next, now
	use := usageByApp(cs)
	for _, a := range apps {
		u := use[a.Name]
		f.Apps = append(f.Apps, topApp{Name: a.Name, CPULimitCores: a.CPUCores, CPUAllocatedCores: a.CPUAllocatedCores,
			CPUUsedCores: u.cpu, CPUSlackCores: a.CPUAllocatedCores - u.cpu, MemoryLimitBytes: a.MemoryBytes,
			MemoryAllocatedBytes: a.MemoryAllocatedBytes, MemoryUsedBytes: u.mem, OOMGrants: u.grants, OOMDenials: u.den})
	}
	return json.NewEncoder(w).Encode(f)
}
