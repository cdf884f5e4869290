#!/usr/bin/env bash
# hosts.sh: several Docker "hosts" on this one machine, the test bed for
# everything multi-host (docs/operator.md, "Several hosts on one machine").
#
#   scripts/hosts.sh up K [--controller | --ha] [--no-escrad] [--insecure]
#        start engines h1..hK (each its own data root, exec root, socket,
#        containerd, cgroup parent and containerd namespace; no bridge), one
#        bin/escrad per engine when bin/escrad exists, and bin/escra-controller
#        first with --controller. --ha instead starts an etcd and two
#        controllers sharing it (--store etcd://…, one elected leader) and
#        gives every escrad both. Idempotent: what already runs is kept, what
#        died (crash, kill -9) is cleaned and started again. Secure by
#        default: mutual TLS for the sessions and an HTTPS admin API, with
#        certificates made by escractl certs in the certificate directory
#        (below); --insecure runs every process --insecure.
#   scripts/hosts.sh down
#        stop exactly the processes recorded in /run/escra-hosts/pids, remove
#        the engines' containers, mounts, cgroups and directories.
#   scripts/hosts.sh status     what runs, one line each
#   scripts/hosts.sh load IMAGE...
#        copy images from the main engine into every running engine
#   scripts/hosts.sh sock N     print engine hN's DOCKER_HOST
#
# Environment: ESCRA_HOSTS_NAME, ESCRA_HOSTS_TAG, ESCRA_HOSTS_METRICS_BASE
# (see below), ESCRA_HOSTS_STORAGE (dockerd --storage-driver, default: the
# engine's choice), ESCRA_CONTROLLER_ADDR (default 127.0.0.1:7470),
# ESCRA_CONTROLLER_ARGS (extra flags for escra-controller), ESCRAD_ARGS,
# with --ha: ESCRA_CONTROLLER2_BASE (the second controller's session port;
# telemetry and admin on the next two, default 7480), ESCRA_ETCD_ADDR
# (client address, default 127.0.0.1:2379; the peer port is the next one),
# ESCRA_HOST_APPS (the apps the host certificates bind, default *),
# ESCRA_CERTS (the certificate directory, default /run/NAME/certs: the CA,
# controller.pem, hN.pem and the operators' admin.pem and viewer.pem; files
# missing for a host are made with `escractl certs`, reusing the CA there).
# An operator's escractl reaches the controller with
# `ESCRA_CERTS=DIR escractl --controller https://ADMIN-ADDRESS ...`.
set -euo pipefail
cd "$(dirname "$0")/.."

# ESCRA_HOSTS_NAME and ESCRA_HOSTS_TAG let a test run its own set beside one
# an operator started: directories /run/NAME, /var/lib/NAME; cgroup parent
# and containerd namespace TAGhN.
NAME=${ESCRA_HOSTS_NAME:-escra-hosts}
TAG=${ESCRA_HOSTS_TAG:-escra-}
RUN=/run/$NAME
LIB=/var/lib/$NAME
PIDS=$RUN/pids
CTL_ADDR=${ESCRA_CONTROLLER_ADDR:-127.0.0.1:7470}
CTL2_BASE=${ESCRA_CONTROLLER2_BASE:-7480}
ETCD_ADDR=${ESCRA_ETCD_ADDR:-127.0.0.1:2379}
METRICS_BASE=${ESCRA_HOSTS_METRICS_BASE:-9470} # escrad hN serves /metrics on BASE+N; 0: none

say() { echo "hosts: $*" >&2; }
die() { echo "hosts: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it starts dockerd and writes cgroups)"

sock() { echo "unix://$RUN/h$1/docker.sock"; }

# starttime PID: field 22 of /proc/PID/stat, so a recycled PID is never
# mistaken for one we started.
starttime() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	set -- $s
	echo "${20}"
}

alive() { # alive PID STARTTIME
	[ -n "$1" ] && [ "$(starttime "$1" 2>/dev/null)" = "$2" ]
}

record() { # record NAME PID
	local st
	st=$(starttime "$2") || die "$1 (pid $2) died at once; see its log under $RUN/logs"
	mkdir -p "$RUN"
	grep -v "^$1 " "$PIDS" 2>/dev/null >"$PIDS.tmp" || true
	echo "$1 $2 $st" >>"$PIDS.tmp"
	mv "$PIDS.tmp" "$PIDS"
}

recorded() { # recorded NAME -> "PID STARTTIME" when that process still runs
	local name pid st
	[ -f "$PIDS" ] || return 1
	while read -r name pid st; do
		if [ "$name" = "$1" ] && alive "$pid" "$st"; then
			echo "$pid $st"
			return 0
		fi
	done <"$PIDS"
	return 1
}

forget() { # forget NAME
	[ -f "$PIDS" ] || return 0
	grep -v "^$1 " "$PIDS" >"$PIDS.tmp" || true
	mv "$PIDS.tmp" "$PIDS"
}

stop_pid() { # stop_pid PID STARTTIME: TERM, wait up to 20 s, then KILL
	local pid=$1 st=$2 i
	alive "$pid" "$st" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 200); do
		alive "$pid" "$st" || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	for i in $(seq 1 50); do
		alive "$pid" "$st" || return 0
		sleep 0.1
	done
}

stop_named() { # stop_named NAME
	local r
	if r=$(recorded "$1"); then
		stop_pid $r
	fi
	forget "$1"
}

engine_ok() { timeout 5 docker -H "$(sock "$1")" version >/dev/null 2>&1; }

# unmount_under DIR: lazily unmount every mount below DIR and DIR itself
# (dockerd bind-mounts its data root onto itself), deepest first.
unmount_under() {
	local m
	awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
}

# clean_cgroups N: the engine's cgroup parent in every hierarchy (absolute,
# so a memory cgroup the caller sits in does not nest it); processes
# still in it belong to containers of this engine whose shim outlived it.
clean_cgroups() {
	local parent=${TAG}h$1 d pid
	# The parent is absolute (/escra-hN); the find also catches one nested
	# under another cgroup by an older relative --cgroup-parent.
	for d in $(find /sys/fs/cgroup -maxdepth 5 -type d -name "$parent" 2>/dev/null); do
		[ -d "$d" ] || continue
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | while read -r pid; do
			kill -KILL "$pid" 2>/dev/null || true
		done
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
}

# containerd_of N: the engine's own containerd (dockerd starts it and writes
# its pid under the exec root).
containerd_of() {
	local f=$RUN/h$1/exec/containerd/containerd.pid pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f" 2>/dev/null) || return 1
	[ -n "$pid" ] && grep -q '^containerd' "/proc/$pid/comm" 2>/dev/null && echo "$pid"
}

# shims_of N: containerd shims of engine hN (they outlive a killed
# containerd); they name the engine's own containerd socket.
shims_of() {
	local sockpath="$RUN/h$1/exec/containerd/containerd.sock" f pid
	# One grep over every cmdline (a fork per process is slow on a busy host).
	for f in $(grep -l -a -F -- "$sockpath" /proc/[0-9]*/cmdline 2>/dev/null); do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		grep -q '^containerd-shim' "/proc/$pid/comm" 2>/dev/null && echo "$pid"
	done
	return 0
}

# clean_engine N: everything of engine hN once its dockerd is gone.
clean_engine() {
	local n=$1 pid st
	if pid=$(containerd_of "$n"); then
		st=$(starttime "$pid") && stop_pid "$pid" "$st"
	fi
	# A shim whose containerd is gone has nothing left to do: no grace period.
	for pid in $(shims_of "$n"); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	clean_cgroups "$n"
	unmount_under "$RUN/h$n"
	unmount_under "$LIB/h$n"
	rm -rf --one-file-system "$RUN/h$n" 2>/dev/null || say "h$n: could not remove all of $RUN/h$n"
}

start_engine() { # start_engine N
	local n=$1 pid
	if recorded "dockerd-h$n" >/dev/null && engine_ok "$n"; then
		say "h$n: engine already runs ($(sock "$n"))"
		return 0
	fi
	stop_named "dockerd-h$n" # recorded but not answering: start it again
	clean_engine "$n"        # leftovers of a crash
	mkdir -p "$RUN/h$n" "$LIB/h$n" "$RUN/logs"
	local args=(
		--data-root "$LIB/h$n" --exec-root "$RUN/h$n/exec"
		--pidfile "$RUN/h$n/docker.pid" -H "$(sock "$n")"
		--containerd-namespace "${TAG}h$n" --containerd-plugins-namespace "${TAG}h$n-plugins"
		--cgroup-parent "/${TAG}h$n" --exec-opt native.cgroupdriver=cgroupfs
		--bridge=none --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false
	)
	[ -n "${ESCRA_HOSTS_STORAGE:-}" ] && args+=(--storage-driver "$ESCRA_HOSTS_STORAGE")
	say "h$n: starting dockerd ($(sock "$n"); log $RUN/logs/dockerd-h$n.log)"
	setsid dockerd "${args[@]}" >>"$RUN/logs/dockerd-h$n.log" 2>&1 </dev/null &
	pid=$!
	sleep 0.2
	record "dockerd-h$n" "$pid"
}

# wait_engine N: until engine hN answers (engines start in parallel).
wait_engine() {
	local n=$1 r pid
	for _ in $(seq 1 300); do
		engine_ok "$n" && return 0
		r=$(recorded "dockerd-h$n") || break
		sleep 0.2
	done
	tail -5 "$RUN/logs/dockerd-h$n.log" >&2
	die "h$n: dockerd did not answer (log $RUN/logs/dockerd-h$n.log)"
}

start_proc() { # start_proc NAME LOG CMD...: start once, record its pid
	local name=$1 log=$2 pid
	shift 2
	if recorded "$name" >/dev/null; then
		say "$name already runs"
		return 0
	fi
	forget "$name"
	mkdir -p "$RUN/logs"
	say "starting $name (log $log)"
	setsid "$@" >>"$log" 2>&1 </dev/null &
	pid=$!
	sleep 0.3
	record "$name" "$pid"
}

CERTS=${ESCRA_CERTS:-$RUN/certs}
INSECURE=0

# ensure_certs K: the files of escractl certs for h1..hK in $CERTS, made
# when one is missing (the CA there is reused, so running processes keep
# working).
ensure_certs() {
	local k=$1 n missing=0 hosts
	for n in $(seq 1 "$k"); do
		[ -f "$CERTS/h$n.pem" ] || missing=1
	done
	for f in ca controller admin viewer; do
		[ -f "$CERTS/$f.pem" ] || missing=1
	done
	[ "$missing" = 1 ] || return 0
	hosts=$(seq -s, -f 'h%g' 1 "$k")
	say "certificates for the controller, $hosts and the operators (admin.pem, viewer.pem) in $CERTS"
	mkdir -p "$CERTS"
	chmod 700 "$CERTS"
	if [ -x bin/escractl ]; then
		bin/escractl certs --dir "$CERTS" --hosts "$hosts" --apps "${ESCRA_HOST_APPS:-*}" >/dev/null || die "escractl certs failed"
	else
		go run ./controller/cmd/escractl certs --dir "$CERTS" --hosts "$hosts" --apps "${ESCRA_HOST_APPS:-*}" >/dev/null || die "escractl certs failed"
	fi
}

# tls_args NAME: mutual TLS with NAME's files in $CERTS, or --insecure.
tls_args() {
	if [ "$INSECURE" = 1 ]; then
		echo "--insecure"
	else
		echo "--tls-ca $CERTS/ca.pem --tls-cert $CERTS/$1.pem --tls-key $CERTS/$1-key.pem"
	fi
}

cmd_up() {
	local k=${1:-}
	shift || true
	local want_ctl=0 want_escrad=1
	for a in "$@"; do
		case $a in
		--controller) want_ctl=1 ;;
		--ha) want_ctl=2 ;;
		--no-escrad) want_escrad=0 ;;
		--insecure) INSECURE=1 ;;
		*) die "up: unknown option $a (use --controller, --ha, --no-escrad, --insecure)" ;;
		esac
	done
	[[ $k =~ ^[1-9][0-9]?$ ]] || die "up: give the number of engines, 1-99 (e.g. hosts.sh up 3)"
	command -v dockerd >/dev/null || die "dockerd is not installed (scripts/setup.sh installs docker.io)"
	mkdir -p "$RUN" "$LIB"
	if [ "$INSECURE" = 0 ] && { [ "$want_ctl" != 0 ] || { [ "$want_escrad" = 1 ] && [ -x bin/escrad ]; }; }; then
		ensure_certs "$k"
	fi
	local ctls=$CTL_ADDR
	if [ "$want_ctl" = 1 ]; then
		[ -x bin/escra-controller ] || die "bin/escra-controller missing: run make build"
		# shellcheck disable=SC2086
		start_proc controller "$RUN/logs/controller.log" bin/escra-controller $(tls_args controller) --state-dir "$LIB/controller" ${ESCRA_CONTROLLER_ARGS:-}
	elif [ "$want_ctl" = 2 ]; then
		[ -x bin/escra-controller ] || die "bin/escra-controller missing: run make build"
		start_etcd
		# The test bed's etcd is plain and without auth, on loopback
		# (docs/operator.md, "High availability", for etcd's TLS and users).
		local store="--store etcd://$ETCD_ADDR --insecure-store" host=${CTL_ADDR%:*}
		# shellcheck disable=SC2086
		start_proc controller "$RUN/logs/controller.log" bin/escra-controller $(tls_args controller) $store ${ESCRA_CONTROLLER_ARGS:-}
		# shellcheck disable=SC2086
		start_proc controller2 "$RUN/logs/controller2.log" bin/escra-controller $(tls_args controller) $store ${ESCRA_CONTROLLER_ARGS:-} \
			--listen "$host:$CTL2_BASE" --telemetry-listen "$host:$((CTL2_BASE + 1))" --admin-listen "$host:$((CTL2_BASE + 2))"
		ctls=$CTL_ADDR,$host:$CTL2_BASE
	fi
	local n
	for n in $(seq 1 "$k"); do
		start_engine "$n"
	done
	for n in $(seq 1 "$k"); do
		wait_engine "$n"
	done
	if [ "$want_escrad" = 1 ] && [ -x bin/escrad ]; then
		for n in $(seq 1 "$k"); do
			metrics=()
			[ "$METRICS_BASE" != 0 ] && metrics=(--metrics-listen "127.0.0.1:$((METRICS_BASE + n))")
			# shellcheck disable=SC2086
			start_proc "escrad-h$n" "$RUN/logs/escrad-h$n.log" bin/escrad --docker-host "$(sock "$n")" \
				--host-id "h$n" --controller "$ctls" $(tls_args "h$n") "${metrics[@]}" ${ESCRAD_ARGS:-}
		done
	elif [ "$want_escrad" = 1 ]; then
		say "bin/escrad missing: engines only (run make build for the daemons)"
	fi
	cmd_status
}

# start_etcd: one etcd member for --ha, data in $LIB/etcd.
start_etcd() {
	command -v etcd >/dev/null || die "etcd is not installed (scripts/setup.sh installs etcd-server)"
	local host=${ETCD_ADDR%:*} port=${ETCD_ADDR##*:} i
	local peer="http://$host:$((port + 1))"
	start_proc etcd "$RUN/logs/etcd.log" etcd --name escra --data-dir "$LIB/etcd" \
		--listen-client-urls "http://$ETCD_ADDR" --advertise-client-urls "http://$ETCD_ADDR" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "escra=$peer"
	for i in $(seq 1 100); do
		(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && return 0
		sleep 0.1
	done
	die "etcd did not listen on $ETCD_ADDR within 10 s (log $RUN/logs/etcd.log)"
}

cmd_down() {
	local name pid st n
	# Daemons and controller first, so nothing reacts to containers going away.
	if [ -f "$PIDS" ]; then
		while read -r name pid st; do
			case $name in escrad-* | controller | controller2) stop_pid "$pid" "$st" ;; esac
		done <"$PIDS"
		# etcd last: the controllers resign their leadership in it.
		while read -r name pid st; do
			case $name in etcd) stop_pid "$pid" "$st" ;; esac
		done <"$PIDS"
	fi
	# Engines: remove their containers while they answer, then stop them
	# all at once (TERM each, then wait for each).
	local engines=() r
	for d in "$RUN"/h* "$LIB"/h*; do
		[ -e "$d" ] || continue
		n=${d##*/h}
		[[ $n =~ ^[0-9]+$ ]] || continue
		[[ " ${engines[*]} " == *" $n "* ]] && continue
		engines+=("$n")
		if engine_ok "$n"; then
			ids=$(docker -H "$(sock "$n")" ps -aq 2>/dev/null || true)
			# shellcheck disable=SC2086
			[ -n "$ids" ] && docker -H "$(sock "$n")" rm -f $ids >/dev/null 2>&1 || true
		fi
		if r=$(recorded "dockerd-h$n"); then
			kill -TERM "${r%% *}" 2>/dev/null || true
		fi
	done
	for n in "${engines[@]}"; do
		stop_named "dockerd-h$n"
		clean_engine "$n"
		rm -rf --one-file-system "$LIB/h$n" 2>/dev/null || say "h$n: could not remove all of $LIB/h$n"
	done
	rm -f "$PIDS"
	rm -rf --one-file-system "$RUN" "$LIB" 2>/dev/null || say "could not remove all of $RUN and $LIB"
	say "down: engines, daemons and controller stopped; containers, mounts, cgroups and data removed"
}

cmd_status() {
	local name pid st state
	[ -f "$PIDS" ] || { say "nothing runs"; return 0; }
	while read -r name pid st; do
		state=dead
		alive "$pid" "$st" && state=running
		case $name in
		dockerd-h*) printf '%-12s pid %-8s %-8s %s\n' "$name" "$pid" "$state" "$(sock "${name#dockerd-h}")" ;;
		*) printf '%-12s pid %-8s %s\n' "$name" "$pid" "$state" ;;
		esac
	done <"$PIDS"
}

cmd_load() {
	[ $# -gt 0 ] || die "load: name the images to copy into the engines"
	local n name pid st
	[ -f "$PIDS" ] || die "load: no engines run (hosts.sh up K first)"
	while read -r name pid st; do
		case $name in dockerd-h*) ;; *) continue ;; esac
		n=${name#dockerd-h}
		alive "$pid" "$st" || continue
		say "h$n: loading $*"
		docker save "$@" | docker -H "$(sock "$n")" load -q >/dev/null || die "load into h$n failed"
	done <"$PIDS"
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
load) shift; cmd_load "$@" ;;
sock) [[ ${2:-} =~ ^[0-9]+$ ]] || die "sock: give an engine number"; sock "$2" ;;
*) die "usage: hosts.sh up K [--controller | --ha] [--no-escrad] [--insecure] | down | status | load IMAGE... | sock N" ;;
esac
