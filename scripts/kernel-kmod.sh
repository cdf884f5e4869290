#!/usr/bin/env bash
# Build escra.ko (make kmod).
#
#   scripts/kernel-kmod.sh          against the patched tree (builds it if needed),
#                                   W=1, any compiler warning fails; prints the .ko path
#   scripts/kernel-kmod.sh --stock  against Debian's stock linux-headers-<version>*-amd64,
#                                   unpacked in the project's cache (kernel-headers.sh):
#                                   the result is a stub that refuses to load (EOPNOTSUPP)
#   ESCRA_KERNEL_VERSION=6.12 ...   the 6.12 tree or headers (default 6.1)
#
# Objects go to bin/kmod/<target>/ (or $KMOD_OUT), never into kmod/.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

if [ "${1:-}" = --stock ]; then
	kver=${ESCRA_KERNEL_VERSION:-6.1}
	# 6.1.0-57-amd64 or 6.12.117+deb12-amd64, never installed on the host.
	kdir=$(scripts/kernel-headers.sh)
	out=$repo/bin/kmod/stock-$kver
else
	kdir=$(scripts/kernel-build.sh | tail -1)
	out=$repo/bin/kmod/patched${ESCRA_KERNEL_FLAVOR:+-$ESCRA_KERNEL_FLAVOR}
fi

out=${KMOD_OUT:-$out}
rm -rf "$out"
mkdir -p "$out"
cp kmod/escra.c kmod/escra_uapi.h kmod/Kbuild "$out"/
echo "[kmod] building escra.ko against $kdir (W=1)" >&2
log=$out/build.log
if ! make -C "$kdir" M="$out" W=1 modules >"$log" 2>&1; then
	cat "$log" >&2
	echo "kernel-kmod: build failed" >&2
	exit 1
fi
if grep -E 'warning:|error:' "$log" | grep -v 'Skipping BTF' >&2; then
	echo "kernel-kmod: compiler warnings with W=1 (see above)" >&2
	exit 1
fi
if [ "${1:-}" = --stock ]; then
	echo "[kmod] stock headers: built a stub; its init refuses with EOPNOTSUPP (no CONFIG_ESCRA_HOOKS)" >&2
fi
echo "$out/escra.ko"
