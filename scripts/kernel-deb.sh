#!/usr/bin/env bash
# make kernel-deb: Debian packages of the Escra-patched Linux 6.1 (the
# tree `make kernel` builds: tinyconfig + vm-tests/kernel.config + the
# patches), with the kernel's own `bindeb-pkg`:
#   dist/kernel/linux-image-<release>-escra_*.deb
#   dist/kernel/linux-headers-<release>-escra_*.deb
# The headers are what escra-dkms builds escra.ko against; the package test
# (packaging/cmd/mkdeb, ESCRA_KERNEL_DEBS) proves that in a Debian root.
# The built tree is copied first: the shared cache stays exactly what the
# vm-tests use. Cached by the same input hash, under
# /var/cache/escra/kernel-deb/<hash>/.
#
# This is the VM-test configuration, not a distribution kernel: it has no
# drivers for real hardware. A host kernel needs Debian's config
# (ESCRA_KERNEL_CONFIG=/boot/config-... is not wired yet: docs/kernel.md).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[kernel-deb %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

src=$(scripts/kernel-build.sh | tail -1)
[ -f "$src/Module.symvers" ] || { echo "kernel-deb: $src is not a built tree" >&2; exit 1; }
key=$(basename "$(dirname "$src")")
cache=${ESCRA_KERNEL_DEB_CACHE:-/var/cache/escra/kernel-deb}
work=$cache/$key
jobs=${JOBS:-$(nproc)}
mkdir -p "$cache"
exec 9>"$cache/$key.lock"
flock 9
if [ ! -e "$work/.done" ]; then
	start=$SECONDS
	rm -rf "${work:?}"
	mkdir -p "$work"
	log "copying the built tree $src"
	cp -a "$src" "$work/linux"
	ver=$(make -s -C "$work/linux" kernelversion)
	log "bindeb-pkg $ver-escra with -j$jobs"
	# -d: the build dependencies are there (the tree is built); dpkg
	# would otherwise want Debian's exact build-dep set.
	make -C "$work/linux" -j"$jobs" LOCALVERSION=-escra KDEB_PKGVERSION="$ver-escra1" \
		DPKG_FLAGS=-d bindeb-pkg 2>&1 | grep -E --line-buffered "dpkg-deb: building|error|Error" >&2 || true
	ls "$work"/linux-headers-*-escra_*.deb "$work"/linux-image-*-escra_*.deb >/dev/null 2>&1 ||
		{ echo "kernel-deb: bindeb-pkg produced no packages (rerun: make -C $work/linux bindeb-pkg)" >&2; exit 1; }
	# The copied tree is only needed to build the packages.
	rm -rf "${work:?}/linux"
	touch "$work/.done"
	log "done in $((SECONDS - start))s"
fi
# The headers' host tools (objtool, modpost) are linked against libelf;
# bindeb-pkg does not say so, and DKMS then fails with "libelf.so.1:
# cannot open shared object file" on a host without it.
hdr=$(ls "$work"/linux-headers-*-escra_*.deb)
if [ -z "$(dpkg-deb -f "$hdr" Depends)" ]; then
	rm -rf "$work/hdr" && dpkg-deb -R "$hdr" "$work/hdr"
	sed -i '/^Architecture:/a Depends: libelf1' "$work/hdr/DEBIAN/control"
	dpkg-deb -b -Zgzip "$work/hdr" "$hdr" >/dev/null
	rm -rf "$work/hdr"
fi
mkdir -p dist/kernel
cp "$work"/linux-image-*-escra_*.deb "$work"/linux-headers-*-escra_*.deb dist/kernel/
ls dist/kernel/*.deb
