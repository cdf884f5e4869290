#!/usr/bin/env bash
# Kernel style of the patch series and escra.ko: checkpatch.pl from the
# patched tree (make kernel builds it), --no-tree. Paths are passed
# absolute: checkpatch misreads relative paths inside this git repository.
set -euo pipefail
cd "$(dirname "$0")/.."
kdir=$(scripts/kernel-build.sh | tail -1)
cp=(perl "$kdir/scripts/checkpatch.pl" --no-tree -q)
rc=0
for p in "$PWD"/patches/linux-6.1/*.patch "$PWD"/patches/linux-6.12/*.patch; do
	"${cp[@]}" "$p" || rc=1
done
"${cp[@]}" -f "$PWD/kmod/escra.c" || rc=1
[ $rc = 0 ] && echo "checkpatch: patches/linux-6.1, patches/linux-6.12 and kmod/escra.c clean"
exit $rc
