# Escra for bare-metal Docker hosts. `make help` lists the targets.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)

GO       ?= go
VERSION  ?= $(shell scripts/version.sh)
LDFLAGS  := -s -w -X github.com/escra-dev/escra/internal/version.Version=$(VERSION)
BIN      := bin
BINARIES := $(BIN)/escrad $(BIN)/escra-controller $(BIN)/escractl

.PHONY: help build test run proto lint kmod kernel vm-test bench deb fuzz setup clean \
	bench-controller bench-daemon bench-kernel bench-faults soak kernel-deb bench-wysiwyg bench-mu \
	vm-test-twohost

help: ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

setup: ## install packages and start dockerd (idempotent; root)
	@scripts/setup.sh

build: ## build escrad (with its BPF object: clang, cached), escra-controller and escractl into bin/ (static)
	@mkdir -p $(BIN)
	@scripts/bpf.sh
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/escrad ./daemon/cmd/escrad
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/escra-controller ./controller/cmd/escra-controller
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/escractl ./controller/cmd/escractl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/escra-gateway ./controller/cmd/escra-gateway
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/escra-queue-proxy ./controller/cmd/escra-queue-proxy

test: ## set-up, then every test CI must prove
	@scripts/setup.sh
	@scripts/test.sh

run: ## set-up, then the main job on this host (mutual TLS and HTTPS admin; INSECURE=1: plain)
	@scripts/setup.sh run
	@$(MAKE) --no-print-directory build
	@scripts/run.sh $(if $(filter 1,$(INSECURE)),--insecure)

proto: ## regenerate proto/escrapb from proto/escra.proto (pinned tools)
	scripts/genproto.sh

lint: ## gofmt, go vet, staticcheck (pinned, from the Go module proxy)
	@scripts/lint.sh

fuzz: ## run every fuzz target for FUZZTIME (default 60s)
	@FUZZTIME=$${FUZZTIME:-60s} scripts/fuzz.sh

kmod: ## build escra.ko against the patched kernel tree (W=1; STOCK=1: Debian stock headers)
	@scripts/kernel-kmod.sh $(if $(STOCK),--stock)

kernel: ## build the patched 6.1 kernel (cached by input hash; ESCRA_KERNEL_VERSION=6.12 for 6.12)
	@scripts/kernel-build.sh

kernel-deb: ## linux-image/linux-headers-*-escra .debs (bindeb-pkg) into dist/kernel/VER-CONFIG/; ESCRA_KERNEL_VERSION=6.12; KERNEL_DEB_CONFIG=host: Debian's config, for real hosts (hours)
	@scripts/kernel-deb.sh

vm-test: ## the kernel-path scenarios in QEMU on 6.1 and 6.12: patched, stock, patched-debug (lockdep, SLUB, THP, tmpfs, ext4) and patched-KASAN
	@ok=0; line=""; \
	for v in 6.1 6.12; do \
		ESCRA_KERNEL_VERSION=$$v vm-tests/run.sh; rc=$$?; \
		ESCRA_KERNEL_VERSION=$$v VMTEST_DEBUG=1 VMTEST_STOCK=0 vm-tests/run.sh; rc2=$$?; \
		ESCRA_KERNEL_VERSION=$$v VMTEST_KASAN=1 VMTEST_STOCK=0 vm-tests/run.sh; rc3=$$?; \
		line="$$line $$v patched+stock $$( [ $$rc = 0 ] && echo PASS || echo FAIL ), $$v patched-debug $$( [ $$rc2 = 0 ] && echo PASS || echo FAIL ), $$v patched-kasan $$( [ $$rc3 = 0 ] && echo PASS || echo FAIL );"; \
		[ $$rc = 0 ] && [ $$rc2 = 0 ] && [ $$rc3 = 0 ] || ok=1; \
	done; \
	echo "vm-test matrix:$$line"; \
	exit $$ok

vm-test-twohost: ## docs/operator.md's quick start as written, in two QEMU guests (Debian 12 + docker.io, stock kernel) from the .debs; checks a CPU limit move and an OOM rescue (root; not in make test; ~7 min, plus ~3 min the first time for the guest root)
	@ESCRA_EXTRA_PKGS="qemu-system-x86 debootstrap e2fsprogs openssh-client" scripts/setup.sh run
	@vm-tests/twohost/run.sh

bench: ## quick benchmark report against the peers (FULL=1 for the full matrix)
	@scripts/setup.sh
	@FULL=$(FULL) scripts/bench/run.sh

bench-controller: ## controller containers-per-core and decision latency
	@scripts/bench/controller.sh

bench-daemon: ## daemon apply latency, docker update, OOM rescue, CPU per 100 idle containers (~3 min)
	@scripts/setup.sh
	$(GO) run ./bench/cmd/bench-daemon -out results/daemon

bench-faults: ## the trust and durability fault checks: real binaries, real etcd, two real Docker engines (scripts/hosts.sh) with one escrad each; partitions are nft DROP rules inside a network namespace the bench makes, never the host's ruleset (~2 min; root)
	@scripts/setup.sh
	@$(MAKE) --no-print-directory build
	$(GO) run ./bench/cmd/bench-faults -out results/faults

bench-kernel: ## telemetry backends like for like (kernel+cgroupfs in the VM, bpf+cgroupfs on this host, 100 groups at 100 ms) and OOM rescue -> results/kernel
	@scripts/kernel-bench.sh
	@$(MAKE) --no-print-directory bench-bpf

soak: ## 30-minute soak, 1,000 simulated containers, TLS, OOM + churn (SOAK_MINUTES); FAULTS=1: 20-minute randomized fault schedule (root)
	@scripts/soak.sh

deb: ## Debian packages for escrad, escra-controller, escra-gateway and escra-dkms into dist/
	@$(MAKE) --no-print-directory build
	@VERSION=$(VERSION) scripts/deb.sh

clean: ## remove build outputs (not the kernel cache)
	rm -rf $(BIN) results dist

.PHONY: dashboard-png
dashboard-png: ## docs/escra-dashboard.png: the Grafana dashboard's PromQL against a real Prometheus scraping escrad and escra-controller under load (~10 min; root)
	@ESCRA_EXTRA_PKGS=prometheus scripts/setup.sh
	@$(MAKE) --no-print-directory build
	@scripts/dashboard-png.sh

.PHONY: bpf bench-bpf
bpf: ## regenerate daemon/source/bpf's Go bindings (bpf2go; commit them) and build its BPF object (clang, libbpf-dev)
	$(GO) generate ./daemon/source/bpf
	@scripts/bpf.sh

bench-bpf: ## bpf vs cgroupfs telemetry on this host's kernel, 100 groups at 100 ms -> results/kernel (~1 min; root)
	@scripts/bpf.sh
	$(GO) run ./bench/cmd/bench-bpf -out results/kernel

bench-wysiwyg: ## WYSIWYG containers: nproc/nginx/sysbench under quota vs WYSIWYG, an Escra run across whole cores, the §V simulation (5-8 min; root)
	@scripts/setup.sh
	$(GO) run ./bench/cmd/bench-wysiwyg -out results/wysiwyg $(BENCH_WYSIWYG_ARGS)

# The Azure Functions 2019 sample beside the checkout (docs/mu.md); absent: synthetic traces.
MU_TRACE ?= $(wildcard ../shared/traces/azure-functions-2019/500_inv.csv)
bench-mu: ## Mu: Fig. 2, Tables 3 and 5, load balancers, placement simulation (~24 min; root; MU_TRACE, MU_HOSTS, MU_PARTS, MU_REPS, MU_WARM_SECONDS)
	@scripts/setup.sh
	$(GO) run ./bench/cmd/bench-mu -out results/mu $(if $(MU_TRACE),-trace $(MU_TRACE))

.PHONY: bench-depsched
bench-depsched: ## dependency-aware scheduling: simulation, scheduling time, real engines + registry (≤ 20 min; root; PARTS=sim,sched to skip the real part)
	@scripts/setup.sh
	@$(MAKE) --no-print-directory build
	$(GO) run ./bench/cmd/bench-depsched -out results/depsched -parts $${PARTS:-sim,sched,real}

.PHONY: bench-pema
bench-pema: ## PEMA and pema-guarded vs RULE, OPTM and Escra on a six-service app (~2 h: 3 repetitions at two SLOs; PEMA_FLAGS="-reps 1 -slo2 0" ~30 min; root; writes results/pema and docs/pema/*.svg)
	@scripts/setup.sh
	$(GO) build -o $(BIN)/bench-pema ./bench/cmd/bench-pema
	$(BIN)/bench-pema -out results/pema -docs docs/pema $(PEMA_FLAGS)
