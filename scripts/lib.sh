# Shell helpers shared by scripts/*.sh (sourced, not run).

# wait_controller_ready NAME LOG PID: wait up to 10 s for the
# "escra-controller ready" line in LOG of the controller PID (started with
# ports ":0"), then set tcp and admin to the addresses it names. On failure
# print LOG or a one-line error prefixed with NAME and exit 1.
wait_controller_ready() {
	local name=$1 log=$2 pid=$3 ready=""
	for _ in $(seq 100); do
		ready=$(grep -m1 'escra-controller ready' "$log" || true)
		[ -n "$ready" ] && break
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
		sleep 0.1
	done
	[ -n "$ready" ] || { echo "$name: controller not ready" >&2; exit 1; }
	tcp=$(sed -E 's/.* sessions=([^ ]+).*/\1/' <<<"$ready")
	admin=$(sed -E 's/.* admin=([^ ]+).*/\1/' <<<"$ready")
}
