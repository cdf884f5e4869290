package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Placement (docs/operator.md §5): room for the bootstrap limits first,
// then fewest containers of the app, then most free CPU, then host id; an
// optional host constraint. The creating itself is proven end to end in
// scripts/e2e_test.go against real engines and daemons.
func TestPlacement(t *testing.T) {
	s := start(t, nil)
	dial(t, s, "h1", 2)
	dial(t, s, "h2", 2)
	dial(t, s, "h3", 1)
	eventually(t, "3 hosts", func() bool { return len(s.Snapshot().Hosts) == 3 })
	if err := s.DefineApp(AppSpec{Name: "a", CPUCores: 4, MemoryBytes: 4 << 30, Sigma: 0.1}); err != nil {
		t.Fatal(err)
	}
	c := func(name, host string, cores float64) DeployContainer {
		return DeployContainer{Name: name, Image: "img", Host: host, CPUCores: cores, MemoryBytes: 1 << 30}
	}
	plan, err := s.place("a", []DeployContainer{c("w1", "", 0.5), c("w2", "", 0.5), c("w3", "", 0.5), c("w4", "", 0.5), c("w5", "h3", 0.5)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range plan {
		got = append(got, p.host.hello.GetHostId())
	}
	// w1-w3 spread one per host; w4 goes to a host with one (h1 and h2 have
	// 1.5 free cores, h3 0.5: h1 by id); w5 is pinned to h3.
	if want := "h1 h2 h3 h1 h3"; strings.Join(got, " ") != want {
		t.Errorf("placed on %v, want %s", got, want)
	}
	if _, err := s.place("a", []DeployContainer{c("big", "", 2.5)}); err == nil || !strings.Contains(err.Error(), "no host has 2.50 free cores") {
		t.Errorf("too big: %v", err)
	}
	if _, err := s.place("a", []DeployContainer{c("x", "h3", 1), c("y", "h3", 1)}); err == nil || !strings.Contains(err.Error(), "container y: no host") {
		t.Errorf("pinned host full: %v", err)
	}
	if _, err := s.place("a", []DeployContainer{c("x", "h9", 0.1)}); err == nil || !strings.Contains(err.Error(), `host "h9" is not connected (connected: h1, h2, h3)`) {
		t.Errorf("unknown host: %v", err)
	}
	if _, err := s.Deploy(context.Background(), "nope", DeployRequest{Containers: []DeployContainer{c("x", "", 0.1)}}); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("deploy of an unknown app: %v", err)
	}
	if _, err := s.RemoveApp(context.Background(), "nope"); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("remove of an unknown app: %v", err)
	}
}

// WYSIWYG §IV-D: a cpu_placement: wysiwyg container goes to the host
// whose own simulation of Algorithm 1 puts the most of it on exclusive
// cores, even against the deployer's load spreading; a host that would
// refuse it as not WYSIWYG is dropped, one that does not answer is left to
// the other scores.
func TestPlacementBySimulatedAllocation(t *testing.T) {
	s := start(t, nil)
	shared := dial(t, s, "h1", 8) // the least loaded: the default choice
	shared.SetCPUPlacement(func(q *pb.CpuPlacementQuery) *pb.CpuPlacementAnswer {
		return &pb.CpuPlacementAnswer{Enabled: true, CoresSeen: 2, SharedMillicores: q.Millicores}
	})
	excl := dial(t, s, "h2", 4)
	excl.SetCPUPlacement(func(q *pb.CpuPlacementQuery) *pb.CpuPlacementAnswer {
		return &pb.CpuPlacementAnswer{Enabled: true, P1Cores: q.Millicores / 1000, CoresSeen: 2, SharedMillicores: q.Millicores % 1000}
	})
	refuses := dial(t, s, "h3", 16)
	refuses.SetCPUPlacement(func(*pb.CpuPlacementQuery) *pb.CpuPlacementAnswer {
		return &pb.CpuPlacementAnswer{Enabled: true, Refused: "cannot ensure WYSIWYG", NotWysiwyg: true}
	})
	eventually(t, "3 hosts", func() bool { return len(s.Snapshot().Hosts) == 3 })
	if err := s.DefineApp(AppSpec{Name: "a", CPUCores: 4, MemoryBytes: 4 << 30, Sigma: 0.1}); err != nil {
		t.Fatal(err)
	}
	plan, err := s.place("a", []DeployContainer{
		{Name: "w", Image: "img", CPUCores: 1.5, MemoryBytes: 1 << 30, CPUClass: "wysiwyg"},
		{Name: "s", Image: "img", CPUCores: 1.5, MemoryBytes: 1 << 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := plan[0].host.hello.GetHostId(); got != "h2" {
		t.Errorf("wysiwyg container placed on %s, want h2 (1 of 1.5 cores exclusive)", got)
	}
	if got := plan[1].host.hello.GetHostId(); got != "h3" {
		t.Errorf("shared container placed on %s, want h3 (the least loaded)", got)
	}
}
