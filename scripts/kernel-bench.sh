#!/usr/bin/env bash
# make bench-kernel: the kernel path measured inside the QEMU guest
# (vm-tests/guest/bench.go) -> results/kernel/summary.json + report.txt.
# Under TCG absolute times are inflated (roughly 5-20x); compare runs on
# the same host, not with bare metal.
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/kernel
mkdir -p "$out"
echo "[bench-kernel] booting the VM benchmark (telemetry 32 groups x 500 periods/s, OOM rescues; kernel and cgroupfs backends)"
VMTEST_BENCH=$out/summary.json vm-tests/run.sh | tee "$out/console.log"
[ -s "$out/summary.json" ] || { echo "bench-kernel: no summary produced" >&2; exit 1; }
{
	echo "Escra kernel path, measured in a QEMU TCG guest (2 vCPUs) on $(hostname), $(date -u +%FT%TZ)"
	echo
	cat "$out/summary.json"
	echo
	echo "telemetry_records_per_s: records delivered to a user-space listener per second"
	echo "telemetry_dropped: records lost (per-CPU ring full, or a multicast no listener took)"
	echo "hook_cost_ns: mean time inside the CFS period hook (local_clock, in the guest)"
	echo "oom_rescue_p50_us/p99_us: page-touch latency of faults whose charge failed at memory.max,"
	echo "  waited for the verdict at the end of the fault and were retried after a grant"
	echo "  (handler raises memory.max by 1 MiB)"
	echo "cgroupfs_*: escrad's stock-kernel backend on the guest's cgroup v2, same run:"
	echo "  cgroupfs_telemetry_records_per_s: records the cgroupfs sampler produced at a 2 ms period"
	echo "    from the same 32 groups (rounds_per_s: sampling rounds it managed of 500 asked)"
	echo "  cgroupfs_oom_rescue_p50_us/p99_us: memory.events 'high' event (start of the page touch it"
	echo "    came in) -> escrad -> controller grants 8 MiB -> memory.max and memory.high raised ->"
	echo "    the hog's next page touch completes"
	echo "  cgroupfs_oom_raise_*: escrad's read of the event -> limit and brake raised;"
	echo "  cgroupfs_oom_stall_*: slowest touches, one per grant (the kernel figures' method)"
	echo "ratio_*: kernel over cgroupfs (telemetry) or cgroupfs over kernel (rescue, stall)"
} >"$out/report.txt"
cat "$out/report.txt"
