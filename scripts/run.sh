#!/usr/bin/env bash
# run.sh: the main job on this host, `make run` (after set-up and build).
#
# Starts the controller and K=3 Docker engines with one escrad each
# (scripts/hosts.sh; escrad picks the kernel backend when escra.ko is
# loaded, else bpf on a kernel with BTF, else cgroupfs), builds the demo image
# locally, deploys the demo app (3 demo-http replicas over the hosts under
# one global budget) with escractl apply, drives an open-loop load with
# bursts while showing `escractl top` (when a terminal is attached), prints
# a summary and writes results/run/summary.json. Then a shorter second pass
# of the same load on a static split of the same budget (the same spec in
# recommend mode: every replica keeps its bootstrap share, Escra §IV-A
# eq. 2), and the summary prints both side by side. Ctrl-C at any point
# stops everything and removes what it created.
#
# Secure by default: mutual TLS between escrad and the controller, and the
# admin API over HTTPS with the operator certificate admin.pem, all made by
# escractl certs in the run's own directory /run/escra-run/certs (removed
# with the engines at the end). `run.sh --insecure` (make run INSECURE=1)
# runs everything plain.
#
# Environment: RUN_SECONDS (seconds of load; set: no top, no terminal
# needed; default 60), RUN_STATIC_SECONDS (the static pass; default the
# same as RUN_SECONDS up to 20, one whole burst cycle: the same mix of
# calm and burst as a pass of whole cycles; 0: no static pass),
# RUN_HOSTS (engines, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
INSECURE=0
for a in "$@"; do
	case $a in
	--insecure) INSECURE=1 ;;
	*) echo "run: unknown argument $a (only --insecure)" >&2; exit 2 ;;
	esac
done

SECONDS_OF_LOAD=${RUN_SECONDS:-60}
K=${RUN_HOSTS:-3}
[[ $SECONDS_OF_LOAD =~ ^[1-9][0-9]*$ ]] || { echo "run: RUN_SECONDS must be a positive number of seconds" >&2; exit 2; }
STATIC_SECONDS=${RUN_STATIC_SECONDS:-$((SECONDS_OF_LOAD < 20 ? SECONDS_OF_LOAD : 20))}
[[ $STATIC_SECONDS =~ ^[0-9]+$ ]] || { echo "run: RUN_STATIC_SECONDS must be a number of seconds (0: no static pass)" >&2; exit 2; }
[[ $K =~ ^[1-9]$ ]] || { echo "run: RUN_HOSTS must be 1-9" >&2; exit 2; }

# Our own set of engines and ports, beside anything an operator runs.
export ESCRA_HOSTS_NAME=escra-run ESCRA_HOSTS_TAG=escra-run- ESCRA_HOSTS_METRICS_BASE=9480
export ESCRA_CONTROLLER_ADDR=127.0.0.1:7480
ADMIN=127.0.0.1:7482
export ESCRA_CONTROLLER_ARGS="--listen $ESCRA_CONTROLLER_ADDR --telemetry-listen 127.0.0.1:7481 --admin-listen $ADMIN --reclaim-every 2s"
if [ "$INSECURE" = 1 ]; then
	export ESCRA_CONTROLLER=http://$ADMIN
	up_args=(--insecure) certs_args=()
else
	# hosts.sh makes the files here; escractl reads admin.pem from it.
	export ESCRA_CERTS=/run/$ESCRA_HOSTS_NAME/certs ESCRA_CONTROLLER=https://$ADMIN
	up_args=() certs_args=(-certs "$ESCRA_CERTS")
fi
OUT=results/run
LOG=$OUT/run.log
APP=demo
mkdir -p "$OUT"
: >"$LOG"

say() { echo "run: $*" | tee -a "$LOG" >&2; }
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
	rm -rf "$OUT/logs"
	cp -r "/run/$ESCRA_HOSTS_NAME/logs" "$OUT/logs" 2>/dev/null || true
	say "stopping: controller, daemons, engines (their containers, cgroups and data go too)"
	scripts/hosts.sh down >>"$LOG" 2>&1 || say "hosts.sh down failed; see $LOG"
	[ "$rc" = 0 ] || say "failed or interrupted (exit $rc); full log: $LOG"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for b in bin/escrad bin/escra-controller bin/escractl; do
	[ -x "$b" ] || { say "$b missing: run make build"; exit 1; }
done
# make build compiles the bpf backend's object (clang, from setup.sh run);
# an escrad built without it runs on cgroupfs where bpf would serve.
scripts/bpf.sh --in bin/escrad ||
	say "bin/escrad was built without the BPF object (make build needs clang): the daemons use cgroupfs where the bpf backend would run"
say "building the load driver and the demo image (docker import of a static binary, no pulls)"
go build -o bin/rundemo ./scripts/rundemo >>"$LOG" 2>&1 || { say "go build ./scripts/rundemo failed; see $LOG"; exit 1; }
IMAGE=$(bin/rundemo image 2>>"$LOG") || { say "building the demo image failed; see $LOG"; exit 1; }

# A run that died without its trap (kill -9) left engines: start clean.
[ -e /run/$ESCRA_HOSTS_NAME ] && scripts/hosts.sh down >>"$LOG" 2>&1
if [ "$INSECURE" = 1 ]; then
	say "running --insecure: plain sessions and an unauthenticated admin API"
else
	say "mutual TLS and an HTTPS admin API; certificates in $ESCRA_CERTS (escractl uses admin.pem there)"
fi
say "starting the controller and $K engines with one escrad each (logs under /run/$ESCRA_HOSTS_NAME/logs)"
scripts/hosts.sh up "$K" --controller "${up_args[@]}" >>"$LOG" 2>&1 || { say "hosts.sh up failed; see $LOG"; exit 1; }
scripts/hosts.sh load "$IMAGE" >>"$LOG" 2>&1 || { say "loading $IMAGE into the engines failed; see $LOG"; exit 1; }
for _ in $(seq 1 100); do
	n=$(bin/escractl get hosts -o json 2>/dev/null | grep -c '"host_id"' || true)
	[ "$n" = "$K" ] && break
	sleep 0.2
done
[ "$n" = "$K" ] || { say "only $n of $K daemons connected to the controller; see /run/$ESCRA_HOSTS_NAME/logs"; exit 1; }
backend=$(bin/escractl get hosts -o json | sed -n 's/.*"backend": "\(.*\)".*/\1/p' | sort -u | tr '\n' ' ')
say "$K hosts connected (backend: ${backend% })"

# spec FILE MODE: the demo app, one replica per host, each on its own
# loopback port.
spec() {
	{
		echo "# Written by scripts/run.sh: the demo app of make run."
		echo "name: $APP"
		echo "mode: $2"
		echo "cpu: 1.5"
		echo "memory: 1GiB"
		echo "sigma: 0.1"
		echo "containers:"
		for i in $(seq 1 "$K"); do
			echo "  - name: web-$i"
			echo "    image: $IMAGE"
			echo "    command: [/demo-http, -listen, \"127.0.0.1:$((18080 + i))\"]"
			echo "    network: host"
			echo "    env: {GOGC: \"50\"}"
		done
	} >"$1"
}

# deploy FILE: apply it and wait for the replicas to answer.
urls=() engines=()
deploy() {
	bin/escractl apply -f "$1" 2>&1 | tee -a "$LOG" >&2
	[ "${PIPESTATUS[0]}" = 0 ] || exit 1
	urls=() engines=()
	for i in $(seq 1 "$K"); do
		u=http://127.0.0.1:$((18080 + i))
		for _ in $(seq 1 50); do
			curl -fsS -o /dev/null "$u/healthz" 2>/dev/null && break
			sleep 0.1
		done
		urls+=("$u")
		engines+=("$(scripts/hosts.sh sock "$i")")
	done
}

# drive SECONDS DIR: the load driver's command line.
drive=()
drive_args() {
	IFS=,
	drive=(bin/rundemo drive -admin "$ESCRA_CONTROLLER" "${certs_args[@]}" -app "$APP" -urls "${urls[*]}" -engines "${engines[*]}"
		-seconds "$1" -out "$2")
	unset IFS
}

SPEC=$OUT/demo.yaml
spec "$SPEC" enforce
say "deploying $SPEC: $K demo-http replicas under 1.5 cores and 1 GiB"
deploy "$SPEC"
drive_args "$SECONDS_OF_LOAD" "$OUT"
if [ -z "${RUN_SECONDS:-}" ] && [ -t 1 ]; then
	say "driving ${SECONDS_OF_LOAD}s of load with bursts; escractl top follows (Ctrl-C stops everything)"
	"${drive[@]}" >>"$LOG" 2>&1 &
	driver=$!
	children+=("$driver")
	bin/escractl top "$APP" &
	children+=("$!")
	rc=0
	wait "$driver" || rc=$?
	[ "$rc" = 130 ] && exit 130
	[ "$rc" = 0 ] || { say "load driver failed; see $LOG"; exit 1; }
	kill -TERM "${children[1]}" 2>/dev/null || true
else
	say "driving ${SECONDS_OF_LOAD}s of load with bursts"
	"${drive[@]}" 2>&1 | tee -a "$LOG" >&2
	rc=${PIPESTATUS[0]}
	[ "$rc" = 130 ] && exit 130
	[ "$rc" = 0 ] || { say "load driver failed; see $LOG"; exit 1; }
fi
bin/escractl get containers >>"$LOG" 2>&1 || true
bin/escractl delete "$APP" >>"$LOG" 2>&1 || say "escractl delete $APP failed; see $LOG"

if [ "$STATIC_SECONDS" -gt 0 ]; then
	# The same spec in recommend mode: the replicas keep their bootstrap
	# share (1.5 cores and 0.9 GiB split equally) and Escra writes no
	# cgroup file, so this is the static split of the same budget.
	spec "$OUT/demo-static.yaml" recommend
	say "static split of the same budget: $OUT/demo-static.yaml (mode: recommend), ${STATIC_SECONDS}s of the same load"
	deploy "$OUT/demo-static.yaml"
	drive_args "$STATIC_SECONDS" "$OUT/static"
	"${drive[@]}" 2>&1 | tee -a "$LOG" >&2
	rc=${PIPESTATUS[0]}
	[ "$rc" = 130 ] && exit 130
	[ "$rc" = 0 ] || { say "load driver failed on the static split; see $LOG"; exit 1; }
	bin/escractl delete "$APP" >>"$LOG" 2>&1 || say "escractl delete $APP failed; see $LOG"
fi

s=$OUT/summary.json
val() { sed -n "s/.*\"$1\": \([^,]*\),\{0,1\}$/\1/p" "$s"; }
echo
echo "summary ($(val load_seconds) s of load, $(val successes) of $(val requests) requests ok, p50 $(val latency_p50_ms) ms, p99 $(val latency_p99_ms) ms):"
printf '  %-20s %s cores\n' "CPU slack p50" "$(val cpu_slack_p50_cores)"
printf '  %-20s %s cores\n' "CPU slack p99" "$(val cpu_slack_p99_cores)"
printf '  %-20s %s (since deploy, as Escra counted them)\n' "throttled periods" "$(val throttled_periods)"
printf '  %-20s %s\n' "OOM grants" "$(val oom_grants)"
printf '  %-20s %s\n' "OOM kills" "$(val oom_kills)"
if [ "$STATIC_SECONDS" -gt 0 ]; then
	echo
	echo "Escra beside a static split of the same budget (throttled periods: the kernel's nr_throttled over the load):"
	bin/rundemo compare -escra "$OUT" -static "$OUT/static"
fi
echo "written to $s; full log: $LOG (controller, escrad and dockerd logs: $OUT/logs/)"
