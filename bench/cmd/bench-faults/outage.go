package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// --- outage: an OOM while no controller answers ------------------------
//
// Both containers idle until the controller's reclaim (Escra §IV-C) holds
// them at usage + δ, below the 64 MiB Docker gave them; then the
// controller is killed. A memhog that needs more than the reclaimed limit
// but less than Docker's runs three times in h1's container: plain Docker
// would have kept it, so escrad must too (it raises the limit to
// Docker's on its own). oom_during_outage_killed counts the runs the
// kernel killed; it must be 0.

const outageRuns = 3

func outageSection() error {
	s, err := setupHosts("outage", nil, func(int) []string { return []string{"--restore-after", "10m"} })
	if err != nil {
		return err
	}
	const docker = 64 << 20
	limit := func() int64 {
		m, _ := strconv.ParseInt(readGroup(s.groups[0], "memory", "memory.limit_in_bytes"), 10, 64)
		return m
	}
	usage := func() int64 {
		u, _ := strconv.ParseInt(readGroup(s.groups[0], "memory", "memory.usage_in_bytes"), 10, 64)
		return u
	}
	if _, ok := until(20*time.Second, func() bool { return limit() < docker-8<<20 }); !ok {
		return fmt.Errorf("h1's limit still %d MiB after 20 s: no reclaim to test against", limit()>>20)
	}
	reduced := limit()
	// What the hog allocates: past the reduced limit, within Docker's
	// with room for the container's own usage.
	mib := int((docker - usage() - 6<<20) >> 20)
	if int64(mib)<<20+usage() <= reduced {
		return fmt.Errorf("h1 at %d MiB, usage %d MiB: a %d MiB hog would not pass the reduced limit", reduced>>20, usage()>>20, mib)
	}
	s.c.p.kill()
	if _, ok := until(15*time.Second, func() bool { return s.connected(0) == 0 }); !ok {
		return errors.New("h1's escrad still connected 15 s after the controller died")
	}
	c0 := s.oomCounts(0)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	killed := 0
	for range outageRuns {
		k, err := execHog(ctx, s.ctrs[0], mib, 300*time.Millisecond)
		if err != nil {
			return err
		}
		killed += b2i(k)
	}
	c1 := s.oomCounts(0)
	raised := c1[`escrad_oom_outcomes_total{outcome="outage_raised"}`] - c0[`escrad_oom_outcomes_total{outcome="outage_raised"}`]
	summary["oom_during_outage_killed"] = killed
	summary["oom_during_outage_runs"] = outageRuns
	summary["oom_during_outage_raised_locally"] = raised
	summary["oom_during_outage_reduced_limit_mib"] = reduced >> 20
	say("outage: h1 reclaimed to %d MiB of Docker's %d; controller killed; %d memhogs of %d MiB: %d OOM-killed, %v OOMs answered on the host",
		reduced>>20, docker>>20, outageRuns, mib, killed, raised)
	return nil
}

// connected is escrad i's escrad_controller_connected (-1: unknown).
func (s *hostsSetup) connected(i int) float64 {
	resp, err := s.mclient[i].Get("http://" + s.metrics[i] + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "escrad_controller_connected" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}
