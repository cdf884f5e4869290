package main

import "github.com/escra-dev/escra/vm-tests/harness"

// scenarios is the registry, one line per scenario, run in this order.
// Order matters: load-unload leaves the module loaded with default
// parameters for the scenarios after it; dmesg-clean runs last. The
// cgroupfs-* scenarios run escrad without the module: on the patched
// kernel (module loaded, unused) and again on Debian's stock kernel.
var scenarios = []harness.Scenario{
	{Name: "load-unload", Fn: scenarioLoadUnload},
	{Name: "telemetry", Fn: scenarioTelemetry},
	{Name: "telemetry-drops", Fn: scenarioTelemetryDrops},
	{Name: "telemetry-burst", Fn: scenarioTelemetryBurst},
	{Name: "oom-grant", Fn: scenarioOOMGrant},
	{Name: "oom-deny", Fn: scenarioOOMDeny},
	{Name: "oom-timeout", Fn: scenarioOOMTimeout},
	{Name: "oom-late-verdict", Fn: scenarioOOMLateVerdict},
	{Name: "oom-noraise", Fn: scenarioOOMGrantNoRaise},
	{Name: "oom-rounds-decay", Fn: scenarioOOMRoundsDecay},
	{Name: "bad-input", Fn: scenarioBadInput},
	{Name: "kernel-source", Fn: scenarioKernelSource},
	{Name: "kmod-throttle-events", Fn: scenarioThrottleEvents},
	{Name: "escrad-e2e", Fn: scenarioEscradE2E},
	{Name: "kmod-oom-pages", Fn: scenarioKmodOOMPages},
	{Name: "oom-mthp", Fn: scenarioOOMMTHP},
	{Name: "oom-swap", Fn: scenarioOOMSwap},
	{Name: "cgroupfs-telemetry", Fn: scenarioCgroupfsTelemetry, NoModule: true},
	{Name: "cgroupfs-oom-grant", Fn: scenarioCgroupfsOOMGrant, NoModule: true},
	{Name: "cgroupfs-oom-deny", Fn: scenarioCgroupfsOOMDeny, NoModule: true},
	{Name: "cgroupfs-oom-absent", Fn: scenarioCgroupfsOOMAbsent, NoModule: true},
	{Name: "bpf-telemetry", Fn: scenarioBPFTelemetry, NoModule: true, Explicit: true}, // stock boot only: needs BTF
	{Name: "bpf-attach-cycles", Fn: scenarioBPFAttachCycles, NoModule: true, Explicit: true},
	{Name: "throttle-alternate", Fn: scenarioThrottleAlternate},
	{Name: "owner", Fn: scenarioOwner},
	{Name: "pagecache-oom", Fn: scenarioPageCacheOOM},
	{Name: "pagecache-oom-ext4", Fn: scenarioPageCacheOOMExt4},
	{Name: "v1-id", Fn: scenarioV1ID}, // moves cpu to v1 and back: last
	{Name: "dmesg-clean", Fn: scenarioDmesgClean},
	{Name: "stock-refusal", Fn: scenarioStockRefusal, Explicit: true},
}
