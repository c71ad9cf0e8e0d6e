# Numaplane: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
K8S_VERSION ?= v1.37.2
TESTENV_CACHE ?= $(HOME)/.cache/numaplane/testenv
TESTENV_BIN := $(TESTENV_CACHE)/$(K8S_VERSION)
DEMO_DIR ?= .demo
DEV_DIR ?= .dev
CARGO ?= cargo
## A clean clone gains nothing from incremental caches, and they doubled the target dir's size
## (a CI run on a full disk failed for it); set CARGO_INCREMENTAL=1 to keep them.
export CARGO_INCREMENTAL ?= 0

export KUBE_APISERVER_BIN := $(TESTENV_BIN)/kube-apiserver
export KUBE_CONTROLLER_MANAGER_BIN := $(TESTENV_BIN)/kube-controller-manager
export ETCD_BIN := $(TESTENV_BIN)/etcd
export KUBE_SCHEDULER_BIN := $(TESTENV_BIN)/kube-scheduler
export KUBECTL_BIN := $(TESTENV_BIN)/kubectl

.PHONY: test test-images test-build deny release dataplane dataplane-images lint fmt manifests image testenv-binaries demo dev-up dev-down build bench bench-large bench-progressive-large fuzz fuzz-specs fuzz-parsers chaos

## test: everything CI runs — formatting, clippy, cargo-deny, unit, drift and integration tests
## and the demo story (it fails if any step does not reach its expected state), the test binaries
## and the demo two at a time (hack/test-parallel.sh: one real node at a time); the image test
## (crates/controller/tests/image.rs) builds the image twice from the test build's binary with
## hack/image.sh, so `make test` needs no release build
## Property tests run a fixed seed here so a CI verdict is reproducible; plain `cargo test`
## draws a fresh seed each run and keeps exploring (failures land in proptest-regressions/).
PROPTEST_SEED ?= 20261130
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target test-images test-build
	PROPTEST_RNG_SEED=$(PROPTEST_SEED) CARGO=$(CARGO) ./hack/test-parallel.sh

## The two chains `make test` runs side by side before the tests: the Go and image builds, and the
## Rust checks and test build (each leaves a core idle at times: downloads, links, a crate's tail).
test-images: testenv-binaries
	# The data-plane slice needs Numaflow 1.8.1's images only (make dataplane builds 1.7.5 too).
	NUMAFLOW_VERSIONS=v1.8.1 NUMAPLANE_TESTENV_CACHE=$(TESTENV_CACHE) ./hack/dataplane-images.sh

test-build: lint deny
	$(CARGO) test --workspace --all-targets --no-run

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) fmt --manifest-path dataplane/counting/Cargo.toml -- --check
	CARGO_TARGET_DIR=$(TESTENV_CACHE)/dataplane/target-counting \
		$(CARGO) clippy --manifest-path dataplane/counting/Cargo.toml --release --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

build:
	$(CARGO) build --workspace

## manifests: regenerate config/crd/*.yaml and config/install.yaml from the Rust types
manifests:
	$(CARGO) run -q -p numaplane-api --bin crdgen

## deny: the dependency graph's licences, bans and sources against deny.toml (cargo-deny, offline;
## DENY_CHECKS=advisories needs the network)
deny:
	./hack/deny.sh

## release: the artefacts of version VERSION (Cargo.toml's) in dist/v$(VERSION): install.yaml,
## the image archive, the plugin archive, a CycloneDX SBOM and SHA256SUMS (docs/install.md)
release:
	CARGO=$(CARGO) ./hack/release.sh $(VERSION)

## image: the controller image ghcr.io/numaproj/numaplane-rs:v<workspace version> as an OCI
## archive, ${CARGO_TARGET_DIR:-target}/image/numaplane-<version>.oci.tar, without Docker: the
## release binary on a base cut from Debian packages, reproducible (prints the manifest digest;
## docs/image.md). Name and tag come from config/manager/manager.yaml and Cargo.toml.
image:
	CARGO=$(CARGO) ./hack/image.sh

## testenv-binaries: build kube-apiserver, kube-controller-manager, kube-scheduler and fetch etcd,
## then the real stack: the Numaflow controller (1.8.1, 1.7.5), KWOK, the Argo Rollouts controller
## and Prometheus, the real node's kubelet, containerd, runc, CNI plugins and images (all cached
## outside the repository; the scripts return at once when cached), and Debian's chromium and
## chromium-driver for the dashboard's browser test (apt, when missing), and Argo CD's built-in
## Numaplane health checks (downloaded from the Go module proxy, not built) for docs/gitops.md
testenv-binaries:
	K8S_VERSION=$(K8S_VERSION) NUMAPLANE_TESTENV_CACHE=$(TESTENV_CACHE) ./hack/testenv-binaries.sh
	NUMAPLANE_TESTENV_CACHE=$(TESTENV_CACHE) ./hack/realstack-binaries.sh
	K8S_VERSION=$(K8S_VERSION) NUMAPLANE_TESTENV_CACHE=$(TESTENV_CACHE) ./hack/realnode-binaries.sh
	NUMAPLANE_TESTENV_CACHE=$(TESTENV_CACHE) ./hack/argocd-builtins.sh
	./hack/browser.sh

## dataplane-images: Numaflow's data-plane images for the real node (its Rust data plane built
## from the Go module for 1.8.1 and 1.7.5, NATS, the counting source, map and sink), cached
## outside the repository (docs/dataplane.md)
dataplane-images: testenv-binaries
	NUMAPLANE_TESTENV_CACHE=$(TESTENV_CACHE) ./hack/dataplane-images.sh

## demo: the real stack (control plane, KWOK, Numaflow, Argo Rollouts, Prometheus) and Numaplane walking the reference samples
## through install, progressive upgrades (success, failure and rollback, fix with force-drain), an
## ISB service upgrade, a MonoVertex upgrade and pause-and-drain; then tears everything down
## (DEMO_ARGS=--keep to keep it running for kubectl until Ctrl-C)
demo: testenv-binaries
	$(CARGO) build -q -p kubectl-numaplane
	$(CARGO) run -q -p numaplane --example demo -- --dir "$(DEMO_DIR)" $(DEMO_ARGS)

## dev-up: the same environment (the real stack, the numaplane binary) left running in the
## background, with instructions; dev-down stops it
dev-up: testenv-binaries
	$(CARGO) build -q -p kubectl-numaplane -p numaplane-testenv -p numaplane --bins
	$(CARGO) run -q -p numaplane --example demo -- dev-up --dir "$(DEV_DIR)"

# The same build as dev-up (another package set would unify features differently and rebuild).
dev-down:
	$(CARGO) build -q -p kubectl-numaplane -p numaplane-testenv -p numaplane --bins
	$(CARGO) run -q -p numaplane --example demo -- dev-down --dir "$(DEV_DIR)"

## bench: the scale benchmark (not part of `make test`; ~10 min on 2 cores): cold start, idle,
## update storm and restart at N=100 and N=1000 PipelineRollouts, written to bench/results.json
## (BENCH_ARGS="--n 100 --out /tmp/r.json" for a quick run)
BENCH_ARGS ?=
bench: testenv-binaries
	$(CARGO) build --release -p numaplane -p numaplane-bench --bin numaplane --bin numaplane-bench
	$${CARGO_TARGET_DIR:-target}/release/numaplane-bench \
		--controller-bin $${CARGO_TARGET_DIR:-target}/release/numaplane \
		--command "make bench$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" $(BENCH_ARGS)

## bench-large: the same at N=1000 and N=10,000 (progressive runs at N=1000 only; ~45 min on 2 cores), written to
## bench/results-large.json with the memory one more rollout costs (rss_per_rollout_kib)
bench-large:
	$(MAKE) --no-print-directory bench BENCH_ARGS="--n 1000,10000 --idle-seconds 60 --converge-timeout-seconds 3600 --progressive-max-n 1000 --out bench/results-large.json"

## bench-progressive-large: the progressive scenarios at N=10,000 (1,000 + 1,000 upgrades at once,
## with a 600 s assessment window: the simulator needs minutes to bring a thousand trials up),
## after a cold start of the 11,001 rollouts they run beside; no floor, idle, storm or restart
## (about 65 minutes on 2 cores, release build cached: a 10- to 13-minute cold start, then
## about 15, 15 and 20 minutes for the three runs), written to bench/results-progressive-n10000.json
bench-progressive-large:
	$(MAKE) --no-print-directory bench BENCH_ARGS="--n 10000 --converge-timeout-seconds 3600 --progressive-only --assessment-end-seconds 600 --out bench/results-progressive-n10000.json"

## fuzz: the hostile-input suite at full size: FUZZ_CASES (10,000) generated rollout specs sent
## through the real API server to the operator (figures in bench/fuzz-results.json; `make test`
## runs a 60-case slice of the same seed; FUZZ_SEED explores another), then coverage-guided
## fuzzing of the pure parsers, FUZZ_SECONDS each (cargo-fuzz, nightly; bench/fuzz-parsers.json)
FUZZ_CASES ?= 10000
FUZZ_SEED ?= 20261202
FUZZ_FROM ?= 0
FUZZ_SECONDS ?= 300
FUZZ_WINDOW ?= 30
fuzz: fuzz-specs fuzz-parsers

## fuzz-specs: only the generated rollout specs, cases FUZZ_FROM.. FUZZ_FROM+FUZZ_CASES (a run
## replaces the earlier runs of its range in bench/fuzz-results.json, so a seed can be covered in
## ranges); FUZZ_WINDOW cases wait for their answer at once
fuzz-specs: testenv-binaries
	HOSTILE_CASES=$(FUZZ_CASES) HOSTILE_SEED=$(FUZZ_SEED) HOSTILE_FROM=$(FUZZ_FROM) HOSTILE_WINDOW=$(FUZZ_WINDOW) \
		HOSTILE_RESULTS=$(CURDIR)/bench/fuzz-results.json \
		$(CARGO) test -p numaplane --test hostile_input -- --nocapture

## fuzz-parsers: only the coverage-guided fuzzing of the pure parsers
fuzz-parsers:
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./hack/fuzz-parsers.sh bench/fuzz-parsers.json

## dataplane: every data-plane scenario (docs/dataplane.md) on the real node with Numaflow's real
## data plane, each message counted; figures in bench/dataplane-results.json (`make test` runs
## two of them: DATAPLANE_SCENARIOS picks others by name)
DATAPLANE_SCENARIOS ?= all
dataplane: dataplane-images
	DATAPLANE_SCENARIOS=$(DATAPLANE_SCENARIOS) DATAPLANE_RESULTS=$(CURDIR)/bench/dataplane-results.json \
		$(CARGO) test -p numaplane --test dataplane -- --nocapture

## chaos: the chaos suite at full size: CHAOS_FLOWS (200) random upgrade flows over four rollouts
## at once on the real stack, with the operator SIGKILLed, kube-apiserver and etcd restarted and
## API requests rejected, timed out, cut and watches dropped at random (figures in
## bench/chaos-results.json; `make test` runs an 8-flow slice of the same seed)
CHAOS_FLOWS ?= 200
CHAOS_SEED ?= 20261204
chaos: testenv-binaries
	CHAOS_FLOWS=$(CHAOS_FLOWS) CHAOS_SEED=$(CHAOS_SEED) CHAOS_RESULTS=$(CURDIR)/bench/chaos-results.json \
		$(CARGO) test -p numaplane --test chaos -- --nocapture
