#!/usr/bin/env bash
# Build the Escra-patched Linux 6.1 or 6.12 for the QEMU vm-tests (make kernel).
#
# Source: Debian's linux-source-<version> tarball. Patches:
# patches/linux-<version>/*.patch (the 6.12 series is its own port, see
# docs/kernel.md).
# Config: `make tinyconfig` + vm-tests/kernel.config. The tree is built in
# place under /var/cache/escra/kernel/<hash of source version, patches and
# config fragment>, reused when complete (.done stamp). A lock serializes
# concurrent callers (parallel make test runs share the cache).
#
#   scripts/kernel-build.sh         build (or reuse) and print the tree's path last
#   scripts/kernel-build.sh --dir   print the tree's path only, build nothing
#   ESCRA_KERNEL_FLAVOR=kasan ...   add vm-tests/kernel-kasan.config (KASAN)
#   ESCRA_KERNEL_FLAVOR=debug ...   add vm-tests/kernel-debug.config (lockdep, SLUB, THP, tmpfs)
#   ESCRA_KERNEL_VERSION=6.12 ...   Debian's linux-source-6.12 and patches/linux-6.12 (default 6.1)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

kver=${ESCRA_KERNEL_VERSION:-6.1}
case $kver in
6.1 | 6.12) ;;
*) echo "kernel-build: unknown ESCRA_KERNEL_VERSION=$kver (want 6.1 or 6.12)" >&2; exit 1 ;;
esac
tarball=/usr/src/linux-source-$kver.tar.xz
patchdir=patches/linux-$kver
fragments=("$repo/vm-tests/kernel.config")
case ${ESCRA_KERNEL_FLAVOR:-} in
"") ;;
kasan) fragments+=("$repo/vm-tests/kernel-kasan.config") ;;
debug) # 6.12 has no CONFIG_MEMCG_KMEM (always on) and defaults to SLUB_TINY
	if [ "${ESCRA_KERNEL_VERSION:-6.1}" = 6.12 ]; then
		fragments+=("$repo/vm-tests/kernel-debug-6.12.config")
	else
		fragments+=("$repo/vm-tests/kernel-debug.config")
	fi ;;
*) echo "kernel-build: unknown ESCRA_KERNEL_FLAVOR=$ESCRA_KERNEL_FLAVOR (want kasan or debug)" >&2; exit 1 ;;
esac
cache=${ESCRA_KERNEL_CACHE:-/var/cache/escra/kernel}
jobs=${JOBS:-$(nproc)}

[ -r "$tarball" ] || { echo "kernel-build: $tarball missing; run make setup (linux-source-$kver)" >&2; exit 1; }
srcver=$(dpkg-query -W -f='${Version}' "linux-source-$kver" 2>/dev/null || stat -c '%s-%Y' "$tarball")
key=$( { echo "$srcver"; cat "$patchdir"/*.patch "${fragments[@]}"; } | sha256sum | cut -c1-16)
dir=$cache/$key/linux

if [ "${1:-}" = --dir ]; then
	echo "$dir"
	exit 0
fi

log() { printf '[kernel %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

mkdir -p "$cache"
exec 9>"$cache/$key.lock"
if ! flock -n 9; then
	log "another build of $key is running; waiting for it"
	flock 9
fi

if [ -e "$cache/$key/.done" ]; then
	log "cached build $key (source $srcver)"
	echo "$dir"
	exit 0
fi

start=$SECONDS
rm -rf "${cache:?}/$key"
mkdir -p "$dir"
log "unpacking linux-source $srcver into $cache/$key"
tar -xJf "$tarball" -C "$dir" --strip-components=1

for p in "$patchdir"/*.patch; do
	log "applying $(basename "$p")"
	patch -d "$dir" -p1 -s --forward <"$p"
done

log "config: tinyconfig + ${fragments[*]##*/}"
make -s -C "$dir" tinyconfig >/dev/null
"$dir"/scripts/kconfig/merge_config.sh -m -O "$dir" "$dir/.config" "${fragments[@]}" >/dev/null
make -s -C "$dir" olddefconfig >/dev/null
# Every option the fragment asks for must have survived the dependency solver.
missing=0
while IFS= read -r line; do
	case $line in CONFIG_*=*) ;; *) continue ;; esac
	grep -qxF "$line" "$dir/.config" || { echo "kernel-build: $line did not stick (dependency missing?)" >&2; missing=1; }
done < <(cat "${fragments[@]}")
[ $missing = 0 ] || exit 1

log "building bzImage and modules_prepare with -j$jobs (cold: about 9 min on 2 idle cores)"
# `modules` runs modpost on vmlinux, producing Module.symvers so external
# modules link against escra_register_hooks without warnings.
make -C "$dir" -j"$jobs" bzImage modules modules_prepare 2>&1 |
	grep -E --line-buffered '^\s+(LD|AR)\s|error|warning:|Kernel: ' >&2 || true
[ -f "$dir/arch/x86/boot/bzImage" ] && [ -f "$dir/Module.symvers" ] ||
	{ echo "kernel-build: build failed (rerun: make -C $dir bzImage)" >&2; exit 1; }

touch "$cache/$key/.done"
log "done in $((SECONDS - start))s: $dir/arch/x86/boot/bzImage"
echo "$dir"
