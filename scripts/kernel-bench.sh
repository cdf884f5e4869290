#!/usr/bin/env bash
# make bench-kernel, part 1: the kernel path measured inside the QEMU guest
# (bench/cmd/bench-kernel-guest, which vm-tests/run.sh boots instead of the
# scenarios when VMTEST_BENCH is set) -> results/kernel/summary.json + report.txt.
# Part 2 (the Makefile runs it next) is make bench-bpf on this host's own
# kernel, which merges its keys into the same summary.json.
# Under TCG absolute times are inflated (roughly 5-20x); compare ratios, or
# runs on the same host, not with bare metal.
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/kernel
mkdir -p "$out"
echo "[bench-kernel] booting the VM benchmark (telemetry: kernel and cgroupfs backends, 100 groups at a 100 ms period; OOM rescues)"
VMTEST_TIMEOUT=${VMTEST_TIMEOUT:-1200} VMTEST_BENCH=$out/summary.json vm-tests/run.sh | tee "$out/console.log"
[ -s "$out/summary.json" ] || { echo "bench-kernel: no summary produced" >&2; exit 1; }
{
	echo "Escra kernel path, measured in a QEMU TCG guest (2 vCPUs) on $(hostname), $(date -u +%FT%TZ)"
	echo
	cat "$out/summary.json"
	echo
	echo "Telemetry (bench/telebench; the host part, make bench-bpf, measures bpf the same way):"
	echo "  100 cgroup v2 groups at a 100 ms CFS period: 10 busy loops under a 1 ms quota (throttled every"
	echo "  period), 90 light loads (0.3 ms every 100 ms) under 50 ms (never throttled)."
	echo "  kernel_*: escrad's kernel backend (kmod.Source over escra.ko); cgroupfs_*: escrad's cgroupfs"
	echo "  backend (period sampler only; cgroupfs_watcher_*: with its default 10 ms throttle watcher)."
	echo "  <b>_records_delivered_per_s: period records that reached the sink, both backends at once"
	echo "  <b>_cpu_us_per_record: the guest process's user + system CPU with the backend alone, plus"
	echo "    for kernel the module's hook and drain time (kernel_hook_us, kernel_drain_us), per record"
	echo "  <b>_throttle_flag_errors: busy records not flagged + light records flagged"
	echo "  kernel_throttle_flag_missed_vs_kernel: flag missing where nr_throttled rose"
	echo "  hook_cost_ns: mean time inside the CFS period hook (local_clock, in the guest)"
	echo "OOM rescue: page-touch latency of faults whose charge failed at memory.max, waited for the"
	echo "  verdict at the end of the fault and were retried after a grant:"
	echo "  kernel_oom_rescue_p50_us/p99_us: through escrad and the controller with the defaults a user"
	echo "    gets (escra.ko oom_timeout_ms, escrad's verdict deadline fitted inside it)"
	echo "  oom_rescue_p50_us/p99_us: the same with both raised (2 s, 1 s): latency, not kills, under TCG"
	echo "  oom_rescue_direct_*: a handler in the guest raises memory.max by 1 MiB and grants"
	echo "  cgroupfs_oom_rescue_p50_us/p99_us: memory.events 'high' event (start of the page touch it"
	echo "    came in) -> escrad -> controller grants 8 MiB -> memory.max and memory.high raised ->"
	echo "    the hog's next page touch completes"
	echo "  cgroupfs_oom_raise_*: escrad's read of the event -> limit and brake raised;"
	echo "  cgroupfs_oom_stall_*: slowest touches, one per grant (the kernel figures' method)"
	echo "ratio_*: kernel over cgroupfs (telemetry), cgroupfs over kernel (rescue, stall)"
} >"$out/report.txt"
cat "$out/report.txt"
