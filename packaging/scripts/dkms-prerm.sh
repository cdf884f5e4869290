#!/bin/sh
set -e
dkms remove -m escra -v @VERSION@ --all >/dev/null 2>&1 || true
exit 0
