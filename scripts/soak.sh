#!/usr/bin/env bash
# make soak: the real escra-controller (mutual TLS) under 1,000 simulated
# containers on 8 hosts with OOM requests, churn and reconnects for
# SOAK_MINUTES (default 30); heap, goroutines and fds at start and end go to
# results/soak/summary.json; every generator error is one "soak error" line
# (kind, expected or not, context) in results/soak/errors.log and counted by
# kind in summary.json. SOAK_RECONNECT_EVERY (default 1m) and
# SOAK_CHURN_RATE (default 5/s) make the races they cause more frequent.
# Not part of CI.
# FAULTS=1: instead, a randomized fault schedule for SOAK_MINUTES
# (default 20) on the real binaries and real cgroups (root):
# bench/cmd/bench-faults -soak; results/soak-faults/summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
if [ "${FAULTS:-0}" = 1 ]; then
	make --no-print-directory build
	exec go run ./bench/cmd/bench-faults -soak "${SOAK_MINUTES:-20}m" ${SOAK_SEED:+-seed "$SOAK_SEED"} -out "${SOAK_OUT:-results/soak-faults}"
fi
out=${SOAK_OUT:-results/soak}
mkdir -p "$out" bin
minutes=${SOAK_MINUTES:-30}
hosts=${SOAK_HOSTS:-8}
CGO_ENABLED=0 go build -trimpath -o bin/escra-controller ./controller/cmd/escra-controller
go build -o bin/escra-soak ./bench/cmd/bench-soak
certs=$(mktemp -d)
names=$(seq -s, -f 'soak%g' 1 "$hosts")
bin/escractl certs --dir "$certs" --hosts "$names" --apps "*" >/dev/null 2>&1 || go run ./controller/cmd/escractl certs --dir "$certs" --hosts "$names" --apps "*" >/dev/null

bin/escra-controller --listen 127.0.0.1:0 --telemetry-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
	--state-dir "$certs/state" --tls-ca "$certs/ca.pem" --tls-cert "$certs/controller.pem" --tls-key "$certs/controller-key.pem" \
	--log-level info 2>"$out/controller.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$certs"' EXIT
wait_controller_ready soak "$out/controller.log" "$pid"
echo "soak: controller pid $pid, sessions $tcp, admin $admin, ${minutes} min"
bin/escra-soak --controller "$tcp" --admin "$admin" --certs "$certs" --hosts "$hosts" \
	--containers "${SOAK_CONTAINERS:-1000}" --duration "${minutes}m" --out "$out" \
	--reconnect-every "${SOAK_RECONNECT_EVERY:-1m}" --churn-rate "${SOAK_CHURN_RATE:-5}" \
	2> >(tee "$out/errors.log" >&2)
