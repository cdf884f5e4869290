#!/usr/bin/env bash
# make bench-controller: start the real escra-controller as its own
# process on loopback, drive it with bench/cmd/bench-loadgen (N simulated
# containers on M simulated hosts), write results/controller/summary.json
# and report.md. Knobs: CONTAINERS HOSTS APPS DURATION WARMUP OOM_RATE
# CONTROLLER_PREFIX CONTROLLER_CPU; BENCH_TLS=1: mutual TLS and tagged telemetry (writes
# results/controller-tls instead).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib.sh
export PATH=/usr/local/go/bin:$PATH
out=results/controller
tlsargs=(--insecure) certargs=()
if [ "${BENCH_TLS:-0}" = 1 ]; then
	out=results/controller-tls
	certs=$(mktemp -d)
	CGO_ENABLED=0 go run ./controller/cmd/escractl certs --dir "$certs" \
		--hosts "$(seq -s, -f 'sim%02g' 0 $((${HOSTS:-10} - 1)))" --apps '*' >/dev/null
	tlsargs=(--tls-ca "$certs/ca.pem" --tls-cert "$certs/controller.pem" --tls-key "$certs/controller-key.pem")
	certargs=(--certs "$certs")
fi
mkdir -p "$out" bin
echo "bench-controller: building"
CGO_ENABLED=0 go build -trimpath -o bin/escra-controller ./controller/cmd/escra-controller
CGO_ENABLED=0 go build -trimpath -o bin/escra-loadgen ./bench/cmd/bench-loadgen

# The controller is a control-plane daemon: run it at a higher CPU priority
# than batch work (nice -10), as its service unit would, so that other jobs
# on this shared 2-core machine do not decide its tail latency. Set
# CONTROLLER_PREFIX= (empty) to measure at nice 0.
default_prefix=""
[ "$(id -u)" = 0 ] && default_prefix="nice -n -10"
# The simulated hosts stand in for other machines: on a machine with two
# or more CPUs the controller gets the last one to itself and the load
# generator the others (CONTROLLER_CPU= (empty) shares them all). The Go
# runtime sizes GOMAXPROCS to the CPUs it may run on.
ncpu=$(nproc)
default_cpu=""
[ "$ncpu" -ge 2 ] && default_cpu=$((ncpu - 1))
ctl_cpu=${CONTROLLER_CPU-$default_cpu}
gen_pin=()
if [ -n "$ctl_cpu" ]; then
	default_prefix="taskset -c $ctl_cpu $default_prefix"
	others=$(seq 0 $((ncpu - 1)) | grep -vx "$ctl_cpu" | paste -sd,)
	gen_pin=(taskset -c "$others")
fi
prefix=${CONTROLLER_PREFIX-$default_prefix}
echo "bench-controller: load average $(cut -d' ' -f1-3 /proc/loadavg); controller prefix: '${prefix}'"

# Ports are picked by the kernel (":0"); the ready line names them. No cap
# on registrations per host: CONTAINERS/HOSTS may exceed the default 1,000.
${prefix} bin/escra-controller "${tlsargs[@]}" --listen 127.0.0.1:0 --telemetry-listen 127.0.0.1:0 \
	--admin-listen 127.0.0.1:0 --store none --max-containers-per-host 0 --log-level info 2>"$out/controller.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; [ -n "${certs:-}" ] && rm -rf "$certs"' EXIT
wait_controller_ready bench-controller "$out/controller.log" "$pid"

${gen_pin[@]+"${gen_pin[@]}"} bin/escra-loadgen "${certargs[@]}" --controller "$tcp" --admin "$admin" --pid "$pid" \
	--containers "${CONTAINERS:-5000}" --hosts "${HOSTS:-10}" --apps "${APPS:-50}" \
	--duration "${DURATION:-30s}" --warmup "${WARMUP:-10s}" --oom-rate "${OOM_RATE:-50}" \
	--clk-tck "$(getconf CLK_TCK)" --out "$out" --controller-prefix "${prefix}"
echo "bench-controller: wrote $out/summary.json and $out/report.md"
