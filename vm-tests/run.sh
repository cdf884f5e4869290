#!/usr/bin/env bash
# Kernel-path tests in QEMU (make vm-test; scripts/test.sh runs it too).
#
# Builds (or reuses) the patched kernel, escra.ko against it, and the static
# guest driver (vm-tests/guest; with VMTEST_BENCH the benchmark's guest,
# bench/cmd/bench-kernel-guest, instead); packs a busybox initramfs; boots
# qemu-system-x86_64 under TCG; the guest runs the scenarios and prints
# --- PASS / --- FAIL lines on the serial console. Then, unless
# VMTEST_STOCK=0, it boots Debian's stock kernel with escra.ko built against
# the stock headers and checks the refusal that escrad detects, then runs
# the cgroupfs-* scenarios (escrad without the module) on that kernel too.
# Exit status: 0 only when every guest reported all scenarios passed.
#
#   VMTEST_RUN=telemetry,oom-grant vm-tests/run.sh   only these scenarios
#   VMTEST_BENCH=results/kernel/summary.json vm-tests/run.sh   benchmark instead
#   VMTEST_TIMEOUT=900   seconds before QEMU is killed (default 600)
#   VMTEST_ACCEL=kvm     use KVM when /dev/kvm works (default tcg: one host
#                        thread per vCPU; tcg-single: both vCPUs on one thread)
#   VMTEST_STOCK=0       skip the stock-kernel boot
#   VMTEST_STOCK_RUN=bpf-attach-cycles   boot only the stock kernel, with these
#                        scenarios (escra_bpf_cycles=N in VMTEST_APPEND sets its count)
#   VMTEST_APPEND=...    more kernel command line for every boot
#   VMTEST_KASAN=1       use the KASAN kernel flavour (vm-tests/kernel-kasan.config)
#   VMTEST_DEBUG=1       use the debug flavour (vm-tests/kernel-debug.config: lockdep,
#                        atomic-sleep and RCU checks, SLUB + kmem, THP, tmpfs, and
#                        ext4 on a virtio disk made here with mkfs.ext4)
#   ESCRA_KERNEL_VERSION=6.12   Debian's 6.12 with patches/linux-6.12 and the 6.12
#                        stock kernel (default 6.1)
#
# Prints one line per kernel and flavour at the end, e.g.
# "vm-test 6.1 patched-debug: PASS".
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

timeout_s=${VMTEST_TIMEOUT:-600}
[ "${VMTEST_KASAN:-0}" = 1 ] && export ESCRA_KERNEL_FLAVOR=kasan
[ "${VMTEST_DEBUG:-0}" = 1 ] && export ESCRA_KERNEL_FLAVOR=debug
flavor=${ESCRA_KERNEL_FLAVOR:-}
kver=${ESCRA_KERNEL_VERSION:-6.1}
export ESCRA_KERNEL_VERSION=$kver
results=()
accel=${VMTEST_ACCEL:-tcg}
work=$(mktemp -d /tmp/escra-vmtest.XXXXXX)
qpid=
tpid=
cleanup() {
	# Only the processes this script started, by PID.
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		kill "$qpid" 2>/dev/null || true
		for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$qpid" 2>/dev/null || break; sleep 0.2; done
		kill -9 "$qpid" 2>/dev/null || true
	fi
	if [ -n "$tpid" ]; then kill "$tpid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '[vm-test %(%H:%M:%S)T] %s\n' -1 "$*"; }
t0=$SECONDS

say "kernel (cached by input hash)"
kdir=$(scripts/kernel-build.sh | tail -1)
say "escra.ko against $kdir"
ko=$(KMOD_OUT=$work/kmod scripts/kernel-kmod.sh | tail -1)
if [ -n "${VMTEST_BENCH:-}" ]; then
	say "static benchmark guest"
	CGO_ENABLED=0 go build -trimpath -o "$work/bench-kernel-guest" ./bench/cmd/bench-kernel-guest
else
	# The bpf backend's object (cached), embedded for bpf-telemetry on
	# the stock boot.
	say "BPF object, then the static guest driver"
	scripts/bpf.sh >/dev/null
	CGO_ENABLED=0 go build -trimpath -o "$work/escra-vmtest" ./vm-tests/guest
fi
say "static escrad (the cgroupfs-* scenarios run it with --backend=cgroupfs)"
CGO_ENABLED=0 go build -trimpath -o "$work/escrad" ./daemon/cmd/escrad

# initramfs NAME KO: busybox, the guest driver (or the benchmark guest),
# the module and /init.
initramfs() {
	local root=$work/$1
	mkdir -p "$root"/{bin,dev,proc,sys,tmp,root}
	if [ -n "${VMTEST_BENCH:-}" ]; then
		cp "$work/bench-kernel-guest" "$root/bench-kernel-guest"
	else
		cp "$work/escra-vmtest" "$root/escra-vmtest"
	fi
	cp "$work/escrad" "$root/escrad"
	cp /bin/busybox "$root/bin/busybox"
	cp "$2" "$root/escra.ko"
	cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s /bin
mount -t cgroup2 none /sys/fs/cgroup
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
echo 1 > /proc/sys/kernel/panic_on_oops
echo "escra-vmtest: kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo)"
if [ -n "$escra_bench" ]; then
	/bench-kernel-guest -module /escra.ko -out /tmp/summary.json
	rc=$?
	echo "ESCRA-BENCH-JSON-BEGIN"
	cat /tmp/summary.json 2>/dev/null
	echo "ESCRA-BENCH-JSON-END"
else
	/escra-vmtest -module /escra.ko -run "$escra_run"
	rc=$?
fi
echo "ESCRA-VMTEST-EXIT=$rc"
poweroff -f
INIT
	chmod +x "$root/init"
	(cd "$root" && find . | cpio -o -H newc --quiet) >"$work/$1.cpio"
}

# boot NAME KERNEL APPEND: run QEMU to completion with a timeout; the
# console goes to $work/NAME.log and stdout. Fails on a missing exit marker.
boot() {
	local log=$work/$1.log start=$SECONDS
	local accel_args=(-accel tcg) disk_args=()
	[ "$accel" = kvm ] && accel_args=(-enable-kvm -cpu host)
	[ "$accel" = tcg-single ] && accel_args=(-accel tcg,thread=single)
	[ -n "$disk" ] && disk_args=(-drive "file=$disk,if=virtio,format=raw")
	say "booting $1 in QEMU ($accel, 2 CPUs, timeout ${timeout_s}s)"
	: >"$log" # exists before tail opens it (the redirect below may come later)
	qemu-system-x86_64 "${accel_args[@]}" -m "$mem" -smp 2 "${disk_args[@]}" \
		-kernel "$2" -initrd "$work/$1.cpio" \
		-nographic -no-reboot -serial stdio -monitor none \
		-append "console=ttyS0 panic=-1 loglevel=4 $3 ${VMTEST_APPEND:-}" \
		</dev/null >"$log" 2>&1 &
	qpid=$!
	tail -n +1 -f --pid="$qpid" "$log" &
	tpid=$!
	while kill -0 "$qpid" 2>/dev/null; do
		if ((SECONDS - start > timeout_s)); then
			say "FAIL: $1 guest still running after ${timeout_s}s; killing QEMU (pid $qpid)"
			exit 1
		fi
		sleep 1
	done
	wait "$qpid" || true
	qpid=
	wait "$tpid" 2>/dev/null || true
	tpid=
	if grep -q 'ESCRA-VMTEST-EXIT=0' "$log" && ! grep -qE -- '--- FAIL|Kernel panic' "$log"; then
		say "$1: PASS (guest $((SECONDS - start))s)"
		return 0
	fi
	say "$1: FAIL (guest log above)"
	return 1
}

append=""
[ -n "${VMTEST_RUN:-}" ] && append+=" escra_run=$VMTEST_RUN"
# The telemetry benchmark runs 100 workload processes: more room.
mem=1G
[ -n "${VMTEST_BENCH:-}" ] && mem=2G
# The debug flavour has ext4 and virtio-blk: an empty ext4 file system
# made here becomes the guest's /dev/vda (scenario pagecache-oom-ext4).
disk=
if [ "$flavor" = debug ]; then
	disk=$work/ext4.img
	truncate -s 256M "$disk"
	mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$disk"
fi
[ -n "${VMTEST_BENCH:-}" ] && append+=" escra_bench=1"
rc=0
name=patched${flavor:+-$flavor}

# stock_boot SCENARIOS: Debian's stock kernel with escra.ko built against
# its headers (which must refuse to load) and escrad's stock-kernel
# backends. The bpf backend's attach patches live kernel text (int3, then
# the new bytes) while the other vCPU runs it; QEMU's multi-threaded TCG
# can go on executing a translation of the old bytes after the patch and
# the kernel's serialising IPI, so the guest takes an int3 its handler no
# longer knows ("Oops: int3" on 6.12, an RCU stall on 6.1: the
# bpf-attach-cycles scenario hit one within 40 cycles in every boot,
# never in 160 cycles single-threaded). That boot runs its two vCPUs on
# one host thread, which keeps cross-modified code coherent.
stock_boot() {
	local stock stock_ko saved=$accel
	if ! stock=$(scripts/kernel-stock.sh --cached); then
		say "stock kernel image not fetched (make setup): stock-refusal NOT run"
		results+=("vm-test $kver stock: NOT RUN (no stock kernel image)")
		return
	fi
	stock_ko=$(KMOD_OUT=$work/kmod-stock scripts/kernel-kmod.sh --stock | tail -1)
	initramfs stock "$stock_ko"
	[ "$accel" = tcg ] && accel=tcg-single
	if boot stock "$stock" "escra_run=$1"; then
		results+=("vm-test $kver stock: PASS")
	else
		results+=("vm-test $kver stock: FAIL")
		rc=1
	fi
	accel=$saved
}

if [ -n "${VMTEST_STOCK_RUN:-}" ]; then
	stock_boot "$VMTEST_STOCK_RUN"
	for r in "${results[@]}"; do echo "$r ($VMTEST_STOCK_RUN)"; done
	exit $rc
fi
initramfs patched "$ko"
if boot patched "$kdir/arch/x86/boot/bzImage" "$append"; then
	results+=("vm-test $kver $name: PASS")
else
	results+=("vm-test $kver $name: FAIL")
	rc=1
fi

if [ -n "${VMTEST_BENCH:-}" ]; then
	mkdir -p "$(dirname "$VMTEST_BENCH")"
	sed -n '/ESCRA-BENCH-JSON-BEGIN/,/ESCRA-BENCH-JSON-END/p' "$work/patched.log" | sed '1d;$d' | tr -d '\r' >"$VMTEST_BENCH"
elif [ "${VMTEST_STOCK:-1}" != 0 ] && [ -z "${VMTEST_RUN:-}" ]; then
	say "stock kernel: escra.ko against Debian's headers must refuse to load"
	# escrad's stock-kernel backend where it is meant to run: Debian's
	# own kernel on cgroup v2, no module.
	stock_boot stock-refusal,cgroupfs-telemetry,cgroupfs-oom-grant,cgroupfs-oom-deny,cgroupfs-oom-absent,bpf-telemetry,bpf-attach-cycles
fi

for r in "${results[@]}"; do echo "$r"; done

if [ $rc = 0 ]; then
	say "PASS in $((SECONDS - t0))s"
else
	say "FAIL in $((SECONDS - t0))s"
fi
exit $rc
