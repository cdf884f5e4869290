#!/usr/bin/env bash
# Everything CI proves, in order: static checks, unit and integration tests
# (real Docker engine, real cgroups), brief fuzzing, then the kernel path in
# QEMU. Each stage prints its name; the first failure stops the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

stage() { printf '\n=== %s\n' "$*"; }

stage "static checks (gofmt, go vet)"
bad=$(gofmt -l $(git ls-files '*.go'))
[ -z "$bad" ] || { echo "gofmt would change: $bad" >&2; exit 1; }
go vet ./...

stage "build (the BPF object from source with clang, then the binaries)"
# make build runs scripts/bpf.sh first: the bpf backend's tests below
# need the object (without it they skip, and fail under CI=true).
make --no-print-directory build

stage "go test (unit, property, integration with the real engine)"
# -p 1: integration tests share the host's engine and cgroups.
go test -count=1 -p 1 -timeout 20m ./... 2>&1 | tee /tmp/escra-gotest.log

stage "fuzz targets, briefly"
FUZZTIME=${FUZZTIME:-20000x} scripts/fuzz.sh | tee /tmp/escra-fuzz-summary.log

vm_passed=0
if [ -x vm-tests/run.sh ]; then
	stage "kernel path in QEMU (vm-tests)"
	# One kernel build fits the cold budget: the 6.1 patched and stock boots
	# run here; the debug flavour (a second build) only in make vm-test.
	echo "make test runs the vm-test subset: 6.1 patched, 6.1 stock (make vm-test adds 6.12 and the debug and KASAN flavours of both)"
	vm-tests/run.sh 2>&1 | tee /tmp/escra-vmtest.log
	vm_passed=$(grep -c -- '^--- PASS' /tmp/escra-vmtest.log || true)
fi

stage "packages (packaging/ module): install, upgrade under systemd, purge, DKMS against the Escra kernel headers"
# packaging/ is its own module (nfpm). The kernel packages come from the
# tree the vm-tests stage built (make kernel-deb; cached by input hash),
# packaged in place: about a minute (measured 54 s; a copy of the tree
# rebuilt all of it, 13.5 min on a fresh machine). The packages land in
# dist/kernel/6.1-vm/ (kernel-deb.sh prints the directory last).
kdebs=$PWD/$(scripts/kernel-deb.sh | tail -1)
(cd packaging && go vet ./... && ESCRA_KERNEL_DEBS=$kdebs go test -count=1 -p 1 -timeout 15m ./...) 2>&1 | tee -a /tmp/escra-gotest.log

# Every stage above stops the run on failure, so reaching here means all
# passed: count Go test packages, fuzz targets and VM scenarios.
go_passed=$(grep -c '^ok ' /tmp/escra-gotest.log || true)
fuzz_passed=$(grep -c '^fuzz: \./' /tmp/escra-fuzz-summary.log || true)
echo
echo "go test packages $go_passed, fuzz targets $fuzz_passed, VM scenarios $vm_passed"
echo "escra: $((go_passed + fuzz_passed + vm_passed)) passed, 0 failed"
