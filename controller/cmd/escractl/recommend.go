package main

import (
	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

// Recommend mode in the tables: what the allocator would set, beside the
// limits the containers hold (docs/spec.md, mode).

// recommended is a container's recommendation as "CPU/MEM", "-" when it
// has none (its app enforces).
func recommended(c adminclient.Container) string {
	if c.RecommendedCPUCores == 0 && c.RecommendedMemoryBytes == 0 {
		return "-"
	}
	return cores(c.RecommendedCPUCores) + "/" + spec.FormatBytes(c.RecommendedMemoryBytes)
}

// maxima is a container's caps as "CPU/MEM", "-" for none.
func maxima(c adminclient.Container) string {
	if c.MaxCPUCores == 0 && c.MaxMemoryBytes == 0 {
		return "-"
	}
	cpu, mem := "-", "-"
	if c.MaxCPUCores > 0 {
		cpu = cores(c.MaxCPUCores)
	}
	if c.MaxMemoryBytes > 0 {
		mem = spec.FormatBytes(c.MaxMemoryBytes)
	}
	return cpu + "/" + mem
}

// appRecommended sums an app's recommendations, "-" when it enforces.
func appRecommended(a adminclient.App, cs []adminclient.Container) string {
	if a.Mode != spec.ModeRecommend {
		return "-"
	}
	var cpu float64
	var mem int64
	for _, c := range cs {
		if c.App == a.Name {
			cpu += c.RecommendedCPUCores
			mem += c.RecommendedMemoryBytes
		}
	}
	return cores(cpu) + "/" + spec.FormatBytes(mem)
}

// anyRecommended reports whether a container in cs has a recommendation.
func anyRecommended(cs []adminclient.Container) bool {
	for _, c := range cs {
		if c.RecommendedCPUCores > 0 || c.RecommendedMemoryBytes > 0 {
			return true
		}
	}
	return false
}

// modeLine is describe's Mode line.
func modeLine(a adminclient.App) string {
	if a.Mode == spec.ModeRecommend {
		return "recommend: limits are computed every period and shown (REC), never applied; apply the spec with mode: enforce to apply them"
	}
	return "enforce"
}
