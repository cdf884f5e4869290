#!/usr/bin/env bash
# make bench-controller: start the real escra-controller as its own
# process on loopback, drive it with controller/bench/loadgen (N simulated
# containers on M simulated hosts), write results/controller/summary.json
# and report.md. Knobs: CONTAINERS HOSTS APPS DURATION WARMUP OOM_RATE.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH
out=results/controller
mkdir -p "$out" bin
echo "bench-controller: building"
CGO_ENABLED=0 go build -trimpath -o bin/escra-controller ./controller/cmd/escra-controller
CGO_ENABLED=0 go build -trimpath -o bin/escra-loadgen ./controller/bench/loadgen

port=${PORT_BASE:-17470}
${CONTROLLER_PREFIX:-} bin/escra-controller --listen 127.0.0.1:$port --telemetry-listen 127.0.0.1:$((port + 1)) \
	--admin-listen 127.0.0.1:$((port + 2)) --log-level warn 2>"$out/controller.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
	curl -fsS "http://127.0.0.1:$((port + 2))/v1/stats" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$out/controller.log" >&2; exit 1; }
	sleep 0.1
done
bin/escra-loadgen --controller 127.0.0.1:$port --admin 127.0.0.1:$((port + 2)) --pid "$pid" \
	--containers "${CONTAINERS:-5000}" --hosts "${HOSTS:-10}" --apps "${APPS:-50}" \
	--duration "${DURATION:-30s}" --warmup "${WARMUP:-10s}" --oom-rate "${OOM_RATE:-50}" \
	--clk-tck "$(getconf CLK_TCK)" --out "$out"
echo "bench-controller: wrote $out/summary.json and $out/report.md"
