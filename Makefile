# fathom: two set-up commands, `make demo` and `make test` (see README).
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Root installs directly; anyone else goes through sudo for system packages only.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTHON ?= python3
VENV := .venv
FATHOM := $(VENV)/bin/fathom
# rustup's cargo: on the PATH, or in the invoking user's ~/.cargo (also when run through sudo).
CARGO := $(shell command -v cargo 2>/dev/null || ls $$HOME/.cargo/bin/cargo 2>/dev/null || \
	ls $$(getent passwd $${SUDO_USER:-root} | cut -d: -f6)/.cargo/bin/cargo 2>/dev/null)
RUST_MIN := 1.85
DEB_PACKAGES := ceph-mon ceph-osd ceph-mgr ceph-mds radosgw ceph-common fio uuid-runtime g++ libradospp-dev \
	librados2 librbd1 libcephfs2 python3-venv procps chromium openssl openssh-server iproute2 ceph-fuse rbd-fuse \
	e2fsprogs nfs-ganesha nfs-ganesha-ceph nfs-ganesha-vfs libnfs-dev prometheus prometheus-node-exporter \
	containerd runc containernetworking-plugins busybox-static iperf3
ENGINE := engine/target/release/fathom-engine
# rustup beside that cargo: it adds the musl target the sampler is built for
RUSTUP := $(if $(CARGO),$(dir $(CARGO))rustup)
# the host sampler alone (fathom-engine --sample without Ceph's libraries), uploaded to the cluster's hosts:
# linked statically against musl (Rust's own target, self-contained: no Debian package), so it runs on any
# Linux host of this machine's architecture whatever its C library (RHEL 8, Ubuntu 20.04, Alpine)
SAMPLER_TARGET := $(shell uname -m)-unknown-linux-musl
SAMPLER := engine/target/$(SAMPLER_TARGET)/release/fathom-sampler
ENGINE_SRC := $(shell find engine/src engine/cxx -name "*.rs" -o -name "*.cc" 2>/dev/null) engine/Cargo.toml engine/build.rs

.PHONY: help install deps venv engine demo test check test-k8s bench-engine bench-rados bench-null bench-steady \
	bench-hosts bench-box bench-s3 bench-s3-memory bench-files bench-slo bench-history bench-verdicts bench-changes bench-live bench-k8s clean

help:
	@echo "make demo   install if needed, run the main job on a disposable local cluster, leave a report"
	@echo "make test   install if needed, run the test suite (starts its own local clusters)"
	@echo "make check  lint, the package's shape and the tests that start no cluster, bed or browser (< 3 min)"

install: deps venv engine

# Idempotent: only asks apt for what is missing.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "Debian packages: all present"; fi
	@# a Go >= 1.21 for the Kubernetes test bed's build and bench-s3 (Debian's golang-go fetches one when none is here)
	@bash bench/go-toolchain.sh >/dev/null

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	@# bytecode up front: start-up CPU counts in every short command's CPU per op
	$(VENV)/bin/python -m compileall -q src
	@touch $@

engine: $(ENGINE) $(SAMPLER)

# Each binary is rebuilt when missing or older than the sources (cargo itself rebuilds only what changed).
$(ENGINE): $(ENGINE_SRC)
	@$(check_rust)
	cd engine && $(CARGO) build --release --quiet --bin fathom-engine
	@touch $@

$(SAMPLER): $(ENGINE_SRC)
	@$(check_rust)
	@if [ ! -x "$(RUSTUP)" ]; then \
	  echo "error: no rustup beside $(CARGO): fathom-sampler is built for Rust's $(SAMPLER_TARGET) target," \
	       "which rustup adds (install Rust with rustup)" >&2; exit 1; fi
	@if ! $(RUSTUP) target list --installed 2>/dev/null | grep -qx "$(SAMPLER_TARGET)"; then \
	  echo "adding Rust's $(SAMPLER_TARGET) target (the sampler's static build): $(RUSTUP) target add $(SAMPLER_TARGET)"; \
	  $(RUSTUP) target add $(SAMPLER_TARGET) || { echo "error: cannot add Rust's $(SAMPLER_TARGET) target" \
	    "with $(RUSTUP) (it downloads from static.rust-lang.org); run \`rustup target add $(SAMPLER_TARGET)\`" \
	    "where that site is reachable, then make again" >&2; exit 1; }; fi
	cd engine && $(CARGO) build --release --quiet --no-default-features --target $(SAMPLER_TARGET) --bin fathom-sampler
	@touch $@

# the check both builds make first: a recent enough cargo
check_rust = if [ -z "$(CARGO)" ]; then \
  echo "error: no Rust toolchain found; fathom-engine needs Rust >= $(RUST_MIN) (install it with rustup," \
       "then run make again; Debian 12's own rustc 1.63 is too old)" >&2; exit 1; fi; \
v=$$($(CARGO) --version | awk '{print $$2}'); \
if [ "$$(printf '%s\n' "$(RUST_MIN)" "$$v" | sort -V | head -1)" != "$(RUST_MIN)" ]; then \
  echo "error: cargo $$v is too old; fathom-engine needs Rust >= $(RUST_MIN) (rustup update)" >&2; exit 1; fi

demo: install
	bash scripts/demo.sh

test: install
	CARGO="$(CARGO)" bash scripts/test.sh

# everyday work: lint, the shape tests and every test that starts no Ceph daemon, test bed or browser
check: install
	CARGO="$(CARGO)" bash scripts/check.sh

# the Kubernetes test bed's tests alone (tests/k8sbed.py; `make test` runs them last): a fresh machine first builds
# Kubernetes from the Go module proxy into ~/.cache/fathom/k8s (6 to 12 min on 2 cores, niced; Go from bench/go-toolchain.sh)
test-k8s: install
	GO=$$(bash bench/go-toolchain.sh) FATHOM_TEST_K8S=1 $(VENV)/bin/pytest -q tests/test_k8sbed.py tests/test_k8s.py \
		tests/test_k8s_sampler.py

bench-engine: install
	$(VENV)/bin/python bench/engine_vs_peers.py

bench-null: install
	$(VENV)/bin/python bench/null_target.py --docs docs/benchmarks.md

bench-rados: install
	$(VENV)/bin/python bench/bench_vs_rados_bench.py -b 4M -b 4K --docs docs/benchmarks.md --json bench/results/bench-rados-vs-rados-bench.json

# the OSD study, fixed time vs steady-state stop, on one fresh cluster (~25 min on 2 cores; see the script)
# what --metrics costs: 64 null engines, a 1 s scrape, with and without alternately (~5 min; target < 1% of a core)
bench-live: install
	$(VENV)/bin/python bench/live_cost.py --docs docs/benchmarks.md

# 32 engine pods on the Kubernetes test bed (built once into ~/.cache/fathom/k8s), null target: orchestrator CPU,
# start skew, and the time to the first measured second against the SSH path (needs root)
bench-k8s: install
	GO=$$(bash bench/go-toolchain.sh) $(VENV)/bin/python bench/k8s_scale.py --json bench/results/k8s-scale.json \
		--docs docs/benchmarks.md

# fathom history over 1,000 runs x 100 figures (target: under 5 s; no cluster)
bench-history: install
	$(VENV)/bin/python bench/history_scale.py --docs docs/benchmarks.md

# one-trial verdicts on identical runs of a real cluster (16 passes, 120 pairs; ~11 min on 2 cores)
bench-verdicts: install
	$(VENV)/bin/python bench/verdicts_same.py --json bench/results/verdicts-same.json --docs docs/benchmarks.md

# the change-point test's power and false-change rate in normal and heavy-tailed noise, clipping on and off
bench-changes: install
	$(VENV)/bin/python bench/changes_power.py --docs docs/benchmarks.md

# fathom slo against a fine open-loop rate sweep: rbd randwrite 4K, rados read 4M, S3 GET 64K
bench-slo: install
	$(VENV)/bin/python bench/slo_search.py --docs docs/benchmarks.md --json bench/results/slo.json

bench-steady: install
	$(VENV)/bin/python bench/steady_state.py --docs docs/benchmarks.md --json bench/results/steady-state.json

# 64 engines on client hosts in network namespaces over SSH: the orchestrator's CPU, the merge, the start skew;
# then bench-box
bench-hosts: install
	$(VENV)/bin/python bench/hosts_scale.py --docs docs/benchmarks.md --json bench/results/hosts-scale.json
	$(MAKE) bench-box

# local clusters on 4 and 12 emulated hosts (an OSD and an RGW each): time and peak memory up and down, the
# sampler's CPU over the hosts (~15 min on 2 cores)
bench-box: install
	$(VENV)/bin/python bench/box_scale.py --docs docs/benchmarks.md --json bench/results/box-scale.json

# fathom-engine vs minio-go and aws-sdk-go-v2 on one local RGW (~20 min on 2 cores). Go: bench/go-toolchain.sh
# finds Go >= 1.21 (which fetches bench/s3peer's toolchain from the Go module proxy), else installs golang-go.
bench-s3: install
	GO=$$(bash bench/go-toolchain.sh) && \
	  $(VENV)/bin/python bench/s3_vs_clients.py --go "$$GO" --docs docs/benchmarks.md

# fathom-engine's RSS over 10 minutes of GETs and PUTs of 256 MiB objects against a bound (~12 min)
bench-s3-memory: install
	$(VENV)/bin/python bench/s3_memory.py --docs docs/benchmarks.md

# fathom's posix target vs fio (psync, io_uring) on a local directory, then on a ceph-fuse mount (~10 min)
bench-files: install
	$(VENV)/bin/python bench/files_vs_fio.py --docs docs/benchmarks.md
	$(VENV)/bin/python bench/files_vs_fio.py --ceph-fuse --docs docs/benchmarks.md

clean:
	rm -rf engine/target $(VENV)
