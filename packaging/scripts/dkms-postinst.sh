#!/bin/sh
# postinst for escra-dkms: register the source with DKMS and build it for
# the running kernel when its headers are installed.
set -e
[ "$1" = configure ] || exit 0
dkms add -m escra -v @VERSION@ >/dev/null 2>&1 || true
if [ -d "/lib/modules/$(uname -r)/build" ]; then
	dkms build -m escra -v @VERSION@ && dkms install -m escra -v @VERSION@ ||
		echo "escra-dkms: building escra.ko for $(uname -r) failed; escrad will use its cgroupfs backend" >&2
else
	echo "escra-dkms: no headers for $(uname -r); install linux-headers-$(uname -r) and run: dkms autoinstall" >&2
fi
exit 0
