#!/usr/bin/env bash
# make dashboard-png: a picture of packaging/grafana/escra-dashboard.json
# from real data, docs/escra-dashboard.png. No Grafana: Debian has none.
#
# Starts the controller and two Docker engines with one escrad each
# (scripts/hosts.sh, as make run does, on their own ports), a Prometheus
# (Debian's package) on 127.0.0.1 scraping them as the jobs `escrad` and
# `escra-controller`, deploys three labelled apps that do real work on the
# engines:
#   shop   2 x demo-http, open-loop HTTP load with bursts (make run's driver)
#   batch  2 x spin wanting 2 cores each, inside 0.6 cores (throttled)
#   cache  2 x memwave whose working set grows past its share (OOM grants)
# then evaluates every panel's PromQL from the dashboard JSON through
# Prometheus's HTTP API over the run and draws the panels in the
# dashboard's grid (scripts/dashboard-png, gonum/plot). A query that
# returns no data fails the run: that is a dashboard defect.
#
# Environment: DASH_MINUTES (minutes of load, default 8), DASH_OUT
# (default docs/escra-dashboard.png). Everything started is stopped by PID
# at the end; results/dashboard/ keeps the logs and the spec.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

MINUTES=${DASH_MINUTES:-8}
PNG=${DASH_OUT:-docs/escra-dashboard.png}
[[ $MINUTES =~ ^[1-9][0-9]*$ ]] || { echo "dashboard: DASH_MINUTES must be a whole number of minutes" >&2; exit 2; }

# Our own engines and ports, beside a make run or an operator's hosts.sh.
export ESCRA_HOSTS_NAME=escra-dash ESCRA_HOSTS_TAG=escra-dash- ESCRA_HOSTS_METRICS_BASE=9560
export ESCRA_CONTROLLER_ADDR=127.0.0.1:7560
ADMIN=127.0.0.1:7562
CTL_METRICS=127.0.0.1:7563
PROM=127.0.0.1:9569
export ESCRA_CONTROLLER_ARGS="--listen $ESCRA_CONTROLLER_ADDR --telemetry-listen 127.0.0.1:7561 --admin-listen $ADMIN --metrics-listen $CTL_METRICS --reclaim-every 2s"
export ESCRA_CONTROLLER=http://$ADMIN
OUT=results/dashboard
LOG=$OUT/dashboard.log
rm -rf "$OUT"
mkdir -p "$OUT"
: >"$LOG"

say() { echo "dashboard: $*" | tee -a "$LOG" >&2; }
die() { say "$*"; exit 1; }
command -v prometheus >/dev/null || die "prometheus is missing: apt-get install prometheus (make dashboard-png does)"
for b in bin/escrad bin/escra-controller bin/escractl; do
	[ -x "$b" ] || die "$b missing: run make build"
done

children=()
cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	for p in "${children[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${children[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	cp -r "/run/$ESCRA_HOSTS_NAME/logs" "$OUT/logs" 2>/dev/null || true
	scripts/hosts.sh down >>"$LOG" 2>&1 || say "hosts.sh down failed; see $LOG"
	[ "$rc" = 0 ] || say "failed or interrupted (exit $rc); log: $LOG"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "building the images (demo-http, spin, memwave) and the load driver"
go build -o bin/rundemo ./scripts/rundemo >>"$LOG" 2>&1 || die "go build ./scripts/rundemo failed; see $LOG"
go build -o bin/dashboard-png ./scripts/dashboard-png >>"$LOG" 2>&1 || die "go build ./scripts/dashboard-png failed; see $LOG"
tags=$(go run ./bench/cmd/bench-images 2>>"$LOG") || die "building the images failed; see $LOG"
tag() { sed -n "s|.*\"escra-bench/$1\": \"\(.*\)\".*|\1|p" <<<"$tags"; }
DEMO=$(tag demo-http) SPIN=$(tag spin) WAVE=$(tag memwave)
[ -n "$DEMO" ] && [ -n "$SPIN" ] && [ -n "$WAVE" ] || die "image tags missing in: $tags"

[ -e "/run/$ESCRA_HOSTS_NAME" ] && scripts/hosts.sh down >>"$LOG" 2>&1
say "starting the controller and 2 engines with one escrad each (plain: loopback only)"
scripts/hosts.sh up 2 --controller --insecure >>"$LOG" 2>&1 || die "hosts.sh up failed; see $LOG"
scripts/hosts.sh load "$DEMO" "$SPIN" "$WAVE" >>"$LOG" 2>&1 || die "loading the images failed; see $LOG"
for _ in $(seq 1 100); do
	n=$(bin/escractl get hosts -o json 2>/dev/null | grep -c '"host_id"' || true)
	[ "$n" = 2 ] && break
	sleep 0.2
done
[ "$n" = 2 ] || die "only $n of 2 daemons connected; see /run/$ESCRA_HOSTS_NAME/logs"
# "BACKEND_BPF" -> "bpf"
backend=$(bin/escractl get hosts -o json | sed -n 's/.*"backend": "\(BACKEND_\)\{0,1\}\(.*\)".*/\2/p' | tr 'A-Z' 'a-z' | sort -u | tr '\n' ' ')

say "starting Prometheus on $PROM (scrape every 5 s: escrad h1 h2, escra-controller)"
mkdir -p "$OUT/prometheus"
cat >"$OUT/prometheus/prometheus.yml" <<YML
# Written by scripts/dashboard-png.sh.
global:
  scrape_interval: 5s
  evaluation_interval: 5s
scrape_configs:
  - job_name: escrad
    static_configs:
      - targets: ['127.0.0.1:$((ESCRA_HOSTS_METRICS_BASE + 1))']
        labels: {instance: h1}
      - targets: ['127.0.0.1:$((ESCRA_HOSTS_METRICS_BASE + 2))']
        labels: {instance: h2}
  - job_name: escra-controller
    static_configs:
      - targets: ['$CTL_METRICS']
        labels: {instance: controller}
YML
prometheus --config.file="$OUT/prometheus/prometheus.yml" --storage.tsdb.path="$OUT/prometheus/data" \
	--web.listen-address="$PROM" --storage.tsdb.retention.time=1d >"$OUT/prometheus/prometheus.log" 2>&1 &
children+=("$!")
for _ in $(seq 1 100); do
	curl -fsS "http://$PROM/-/ready" >/dev/null 2>&1 && break
	sleep 0.2
done
curl -fsS "http://$PROM/-/ready" >/dev/null || die "Prometheus did not get ready; see $OUT/prometheus/prometheus.log"
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)

SPEC=$OUT/apps.yaml
cat >"$SPEC" <<YAML
# Written by scripts/dashboard-png.sh: three apps for the dashboard picture.
name: shop
cpu: 1
memory: 1GiB
sigma: 0.3
containers:
  - name: web-1
    image: $DEMO
    command: [/demo-http, -listen, "127.0.0.1:18561"]
    network: host
    host: h1
    env: {GOGC: "50"}
  - name: web-2
    image: $DEMO
    command: [/demo-http, -listen, "127.0.0.1:18562"]
    network: host
    host: h2
    env: {GOGC: "50"}
---
name: batch
cpu: 0.6
memory: 256MiB
containers:
  - name: spin
    image: $SPIN
    command: [/spin, -threads, "2"]
    replicas: 2
---
name: cache
cpu: 0.4
memory: 320MiB
sigma: 0.3
allocator: {oom_step: 16MiB}
containers:
  - name: wave-a
    image: $WAVE
    command: [/memwave, -min, "32", -max, "150", -period, "100s"]
    host: h1
  - name: wave-b
    image: $WAVE
    command: [/memwave, -min, "32", -max, "150", -period, "140s"]
    host: h2
YAML
sleep 15 # a little of the daemons alone first
say "deploying shop, batch and cache ($SPEC)"
bin/escractl apply -f "$SPEC" 2>&1 | tee -a "$LOG" >&2
[ "${PIPESTATUS[0]}" = 0 ] || die "escractl apply failed"
for u in http://127.0.0.1:18561 http://127.0.0.1:18562; do
	for _ in $(seq 1 50); do
		curl -fsS -o /dev/null "$u/healthz" 2>/dev/null && break
		sleep 0.1
	done
done
say "driving $MINUTES min of load on shop (20 req/s, +40 in bursts every 20 s); batch and cache run on their own"
bin/rundemo drive -admin "$ESCRA_CONTROLLER" -app shop -urls http://127.0.0.1:18561,http://127.0.0.1:18562 \
	-engines "$(scripts/hosts.sh sock 1),$(scripts/hosts.sh sock 2)" -seconds $((MINUTES * 60)) -base 20 -burst 40 -out "$OUT" >>"$LOG" 2>&1 ||
	die "load driver failed; see $LOG"
bin/escractl get containers >>"$LOG" 2>&1 || true
sleep 10 # the last scrapes
end=$(date -u +%Y-%m-%dT%H:%M:%SZ)

say "rendering $PNG from Prometheus ($start to $end)"
bin/dashboard-png -prom "http://$PROM" -dashboard packaging/grafana/escra-dashboard.json -start "$start" -end "$end" -out "$PNG" \
	-note "Data: escra-controller and 2 escrad (backend: ${backend% }) on scripts/hosts.sh engines of one 2-core Debian 12 machine (kernel $(uname -r)); apps shop (2 x demo-http, open-loop HTTP load of 20 req/s with bursts of +40), batch (2 x spin, 2 threads each, in 0.6 cores), cache (2 x memwave growing past its share)." \
	2>&1 | tee -a "$LOG" >&2
[ "${PIPESTATUS[0]}" = 0 ] || die "dashboard-png failed: see above"
say "wrote $PNG"
