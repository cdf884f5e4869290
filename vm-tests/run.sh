#!/usr/bin/env bash
# Kernel-path tests in QEMU (make vm-test; scripts/test.sh runs it too).
#
# Builds (or reuses) the patched kernel, escra.ko against it, and the static
# guest driver (vm-tests/guest); packs a busybox initramfs; boots
# qemu-system-x86_64 under TCG; the guest runs the scenarios and prints
# --- PASS / --- FAIL lines on the serial console. Exit status: 0 only when
# the guest reported every scenario passed.
#
#   VMTEST_RUN=telemetry,oom-grant vm-tests/run.sh   only these scenarios
#   VMTEST_BENCH=results/kernel/summary.json vm-tests/run.sh   benchmark instead
#   VMTEST_TIMEOUT=900   seconds before QEMU is killed (default 600)
#   VMTEST_ACCEL=kvm     use KVM when /dev/kvm works (default tcg)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
repo=$PWD

timeout_s=${VMTEST_TIMEOUT:-600}
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
ko=$(scripts/kernel-kmod.sh | tail -1)
say "static guest driver"
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp,root}
CGO_ENABLED=0 go build -trimpath -o "$root/escra-vmtest" ./vm-tests/guest
cp /bin/busybox "$root/bin/busybox"
cp "$ko" "$root/escra.ko"
cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s /bin
mount -t cgroup2 none /sys/fs/cgroup
echo 1 > /proc/sys/kernel/panic_on_oops
echo "escra-vmtest: kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo)"
if [ -n "$escra_bench" ]; then
	/escra-vmtest -module /escra.ko -bench /tmp/summary.json
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
(cd "$root" && find . | cpio -o -H newc --quiet) >"$work/initramfs.cpio"

append="console=ttyS0 panic=-1 loglevel=4"
[ -n "${VMTEST_RUN:-}" ] && append+=" escra_run=$VMTEST_RUN"
[ -n "${VMTEST_BENCH:-}" ] && append+=" escra_bench=1"
accel_args=(-accel tcg)
[ "$accel" = kvm ] && accel_args=(-enable-kvm -cpu host)

log=$work/console.log
say "booting QEMU ($accel, 2 CPUs, timeout ${timeout_s}s)"
qemu-system-x86_64 "${accel_args[@]}" -m 1G -smp 2 \
	-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$work/initramfs.cpio" \
	-nographic -no-reboot -serial stdio -monitor none -append "$append" \
	</dev/null >"$log" 2>&1 &
qpid=$!
tail -n +1 -f --pid="$qpid" "$log" &
tpid=$!
boot=$SECONDS
while kill -0 "$qpid" 2>/dev/null; do
	if ((SECONDS - boot > timeout_s)); then
		say "FAIL: guest still running after ${timeout_s}s; killing QEMU (pid $qpid)"
		exit 1
	fi
	sleep 1
done
wait "$qpid" || true
qpid=
wait "$tpid" 2>/dev/null || true
tpid=

if [ -n "${VMTEST_BENCH:-}" ]; then
	mkdir -p "$(dirname "$VMTEST_BENCH")"
	sed -n '/ESCRA-BENCH-JSON-BEGIN/,/ESCRA-BENCH-JSON-END/p' "$log" | sed '1d;$d' | tr -d '\r' >"$VMTEST_BENCH"
fi
if grep -q 'ESCRA-VMTEST-EXIT=0' "$log" && ! grep -qE -- '--- FAIL|Kernel panic' "$log"; then
	say "PASS in $((SECONDS - t0))s (guest $((SECONDS - boot))s)"
	exit 0
fi
say "FAIL (guest log above; $((SECONDS - t0))s)"
exit 1
