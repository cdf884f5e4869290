#!/usr/bin/env bash
# A target that a later issue fills: say so and fail.
echo "make $1: not yet — it arrives with $2" >&2
exit 2
