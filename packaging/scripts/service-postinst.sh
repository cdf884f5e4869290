#!/bin/sh
# postinst for escrad and escra-controller: make systemd see the unit and
# enable it. It is not started here: review /etc/escra/ first, then
# `systemctl start @UNIT@`.
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	systemctl enable @UNIT@ >/dev/null 2>&1 || true
fi
exit 0
