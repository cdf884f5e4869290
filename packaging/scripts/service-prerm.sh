#!/bin/sh
# prerm for escrad, escra-controller and escra-gateway: stop on removal only. An upgrade
# keeps the old process running until postinst restarts it with the new
# binary, so containers are without their agent for one restart, not for
# the whole unpack.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	deb-systemd-invoke stop @UNIT@ >/dev/null || true
fi
exit 0
