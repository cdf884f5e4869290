#!/usr/bin/env bash
# Set up this Debian 12 host for Escra, by need. Idempotent and quiet when
# there is nothing to do. Run as root.
#
#   scripts/setup.sh run    what the main job uses (make run): the engine,
#                           its tools, and clang for escrad's BPF object
#   scripts/setup.sh test   also what the builds, tests and benchmarks use
#                           (make test, make setup): the default
#   scripts/setup.sh --print-packages run|test   list the packages, install nothing
#
# It never installs or upgrades a kernel image on the host, so the next
# reboot boots what booted before: kernel headers and images for the VM
# tests are fetched with `apt-get download` and unpacked into the project's
# cache (scripts/kernel-headers.sh, scripts/kernel-stock.sh), and set-up
# refuses a package set that would pull a linux-image package.
# It starts dockerd when no engine answers (also after an unclean death),
# and for `test` the local registry. It downloads nothing except through
# apt and the Go module proxy.
set -euo pipefail

say() { echo "setup: $*" >&2; }
die() { echo "setup: $*" >&2; exit 1; }

print=0
if [ "${1:-}" = --print-packages ]; then
	print=1
	shift
fi
profile=${1:-test}
case $profile in run | test) ;; *) die "unknown profile '$profile' (want run or test)" ;; esac

# Packages, grouped by what needs them.
run_pkgs=(
	# engine and containers (scripts/hosts.sh starts one dockerd per host)
	docker.io
	# the scripts' own tools
	iproute2 procps psmisc curl ca-certificates
	# escrad's BPF backend: make build compiles its object from source
	# (scripts/bpf.sh; unstripped, so no llvm): 53 packages, 84 MB, under a
	# minute on a fresh host, for the demo on bpf instead of cgroupfs.
	clang libbpf-dev
)
test_pkgs=(
	# kernel path: build Debian's 6.1 and 6.12 with our patches, boot them in
	# QEMU. Stock headers and images are not installed (see above).
	linux-source-6.1 linux-source-6.12 build-essential bc bison flex
	libelf-dev libssl-dev dwarves kmod xz-utils cpio busybox-static
	qemu-system-x86 e2fsprogs # mkfs.ext4: the debug flavour's ext4 disk
	# HA controllers: a real etcd for --store etcd:// and its tests
	etcd-server
	# wire contract
	protobuf-compiler
	# benchmarks: real third-party servers and clients (bench/, scripts/bench/)
	nginx-light redis-server redis-tools wrk
	# packages: install the .debs into a debootstrapped root, check units
	debootstrap systemd
	# WYSIWYG containers: a container's /proc view, a CPU benchmark
	lxcfs sysbench
	# dependency-aware placement: a real registry on 127.0.0.1:5000
	docker-registry
	# make bench-faults: partitions are nft DROP rules inside a network
	# namespace the bench makes (iproute2's ip netns, util-linux's nsenter);
	# the package's nftables.service stays disabled: the host's ruleset is
	# never loaded or changed
	nftables
	# misc tools used by scripts
	rsync
)
pkgs=("${run_pkgs[@]}")
[ "$profile" = run ] || pkgs+=("${test_pkgs[@]}")
[ -n "${ESCRA_EXTRA_PKGS:-}" ] && read -r -a extra <<<"$ESCRA_EXTRA_PKGS" && pkgs+=("${extra[@]}")

if [ $print = 1 ]; then
	printf '%s\n' "${pkgs[@]}"
	exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts dockerd)"
[ -r /etc/debian_version ] || die "needs Debian 12 (apt and Debian's package names)"

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/tmp/escra-apt.log 2>&1 || { tail -20 /tmp/escra-apt.log >&2; die "apt-get update failed (log: /tmp/escra-apt.log)"; }
	# What apt would do, first: a kernel image changes how the host boots.
	images=$(apt-get install -s -q --no-install-recommends "${missing[@]}" 2>>/tmp/escra-apt.log | awk '$1 == "Inst" && $2 ~ /^linux-image-/ {print $2}')
	[ -z "$images" ] || die "refusing: installing ${missing[*]} would pull the kernel image(s) $(echo $images)"
	apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/escra-apt.log 2>&1 ||
		{ tail -20 /tmp/escra-apt.log >&2; die "apt-get install failed (log: /tmp/escra-apt.log)"; }
fi

command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || die "Go is missing: install Go >= 1.26 at /usr/local/go"

if [ "$profile" = test ]; then
	# kernel path: Debian's stock headers and kernel images, unpacked into
	# /var/cache/escra (apt-get download, not installed), for the stub
	# escra.ko and the vm-test of its refusal on a kernel without the hooks.
	for v in 6.1 6.12; do
		ESCRA_KERNEL_VERSION=$v "$(dirname "$0")"/kernel-headers.sh >/dev/null ||
			say "stock $v headers unavailable; the stub module and its vm-test cannot build"
		ESCRA_KERNEL_VERSION=$v "$(dirname "$0")"/kernel-stock.sh >/dev/null ||
			say "stock $v kernel image unavailable; vm-tests skip the $v stock boot"
	done
fi

# --- Docker Engine -------------------------------------------------------
# Debian's client is /usr/bin/docker; a newer client elsewhere on PATH works
# too (API version negotiation).
docker_ok() { timeout 10 docker -H unix:///var/run/docker.sock version >/dev/null 2>&1; }

if ! docker_ok; then
	pidfile=/var/run/docker.pid
	if [ -f "$pidfile" ]; then
		pid=$(cat "$pidfile" 2>/dev/null || true)
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/comm" 2>/dev/null; then
			say "dockerd (pid $pid) runs but does not answer; waiting for it"
		else
			say "removing stale dockerd pid file and socket"
			rm -f "$pidfile" /var/run/docker.sock
		fi
	fi
	# A containerd left behind by a killed dockerd keeps its pid file too.
	cpid=/var/run/docker/containerd/containerd.pid
	if [ -f "$cpid" ] && ! kill -0 "$(cat "$cpid" 2>/dev/null || echo 0)" 2>/dev/null; then
		rm -f "$cpid" /var/run/docker/containerd/containerd.sock
	fi
	if ! pgrep -x dockerd >/dev/null; then
		say "starting dockerd (no bridge network; log /var/log/escra-dockerd.log)"
		# No bridge, no iptables: project containers use host networking or none.
		setsid nohup /usr/sbin/dockerd --bridge=none --iptables=false --ip-masq=false \
			--exec-opt native.cgroupdriver=cgroupfs \
			>>/var/log/escra-dockerd.log 2>&1 </dev/null &
	fi
	for _ in $(seq 1 60); do
		docker_ok && break
		sleep 0.5
	done
	docker_ok || { tail -20 /var/log/escra-dockerd.log >&2; die "dockerd did not answer within 30 s"; }
fi

[ "$profile" = test ] || exit 0

# --- Registry (dependency-aware scheduling, docs/depsched.md) ------------
# Debian's docker-registry on 127.0.0.1:5000 only, no auth, its own store.
# Engines treat 127.0.0.0/8 registries as insecure (plain HTTP) by default.
registry_ok() { curl -fsS -m 3 http://127.0.0.1:5000/v2/ >/dev/null 2>&1; }
if ! registry_ok; then
	mkdir -p /etc/escra /var/lib/escra-registry
	cat >/etc/escra/registry.yml <<'YML'
version: 0.1
storage:
  filesystem:
    rootdirectory: /var/lib/escra-registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:5000
YML
	say "starting docker-registry on 127.0.0.1:5000 (log /var/log/escra-registry.log)"
	setsid nohup docker-registry serve /etc/escra/registry.yml >>/var/log/escra-registry.log 2>&1 </dev/null &
	echo $! >/run/escra-registry.pid
	for _ in $(seq 1 40); do
		registry_ok && break
		sleep 0.25
	done
	registry_ok || { tail -20 /var/log/escra-registry.log >&2; die "docker-registry did not answer on 127.0.0.1:5000"; }
fi
exit 0
