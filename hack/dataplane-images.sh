#!/usr/bin/env bash
# Builds the images Numaflow's real data plane needs on the test environment's real node
# (docs/dataplane.md), as OCI archives under the names the shipped controller definitions and the
# reference samples render, so that they stay unchanged:
#   quay.io/numaproj/numaflow:v1.8.1, :v1.7.5
#                                      /bin/numaflow (the Go binary hack/realstack-binaries.sh
#                                      builds), /bin/numaflow-rs and /bin/entrypoint (Numaflow's
#                                      Rust data plane, built from the Go module's rust/ workspace)
#   docker.io/library/nats:2.10.3, :2.10.17
#                                      /nats-server from the github.com/nats-io/nats-server/v2 module
#   docker.io/natsio/nats-server-config-reloader:0.7.0, docker.io/natsio/prometheus-nats-exporter:0.9.1
#                                      stand-ins that only stay up: the Go module proxy does not
#                                      serve their modules (the JetStream pods need the containers
#                                      to run; nothing here reloads NATS' config or scrapes it)
#   numaplane.local/counting:testenv   the counting source, map and sink of dataplane/counting
# Outputs, outside the repository:
#   ${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}/dataplane/*.oci.tar (+ .ref)
# Idempotent: the Rust data plane and NATS are built once; the counting binary is rebuilt by
# cargo when its source changes, and its archive repacked only then. Prints the directory last.
set -euo pipefail

# Both versions the real stack builds the controller of (a Numaflow controller upgrade needs both).
NUMAFLOW_VERSIONS="${NUMAFLOW_VERSIONS:-v1.8.1 v1.7.5}"
# The reference ISB service sample's version, and another for an ISB service upgrade.
NATS_VERSIONS="${NATS_VERSIONS:-v2.10.3 v2.10.17}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}"
OUT="$CACHE_ROOT/dataplane"
mkdir -p "$OUT"

log() { printf '[dataplane-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=hack/lib/oci.sh
. "$ROOT/hack/lib/oci.sh"
# shellcheck source=hack/lib/gobuild.sh
. "$ROOT/hack/lib/gobuild.sh"

# What Numaflow's Rust workspace builds with (its Dockerfile installs the same): clang and
# libclang for bindgen, cmake for librdkafka, bison for the vendored Kerberos, protoc.
install_debs clang libclang-dev cmake bison protobuf-compiler make
for t in umoci jq go cargo ldd clang cmake; do command -v "$t" >/dev/null || die "$t missing (make testenv-binaries installs umoci and jq)"; done
for v in $NUMAFLOW_VERSIONS; do
  [ -x "$CACHE_ROOT/realstack/numaflow-$v" ] || die "no $CACHE_ROOT/realstack/numaflow-$v: run hack/realstack-binaries.sh first"
done

TOOLCHAIN="${RUSTUP_TOOLCHAIN:-$(cd "$ROOT" && rustc --version | awk '{print $2}')}"

# copy_with_libs ROOTFS BIN DEST: BIN at DEST in ROOTFS with the host's program interpreter and
# shared libraries it loads (the binaries are linked here, against the host's glibc).
copy_with_libs() {
  local rootfs=$1 bin=$2 dest=$3 lib
  install -D -m 0755 "$bin" "$rootfs$dest"
  for lib in $(ldd "$bin" | grep -oE '/[^ ]+' | sort -u); do
    cp -L --parents "$lib" "$rootfs/" 2>/dev/null || die "cannot copy $lib for $bin"
  done
}

# base_files ROOTFS: the CA bundle and time zones a Numaflow container reads, /tmp.
base_files() {
  local rootfs=$1
  mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/usr/share/zoneinfo" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  [ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  [ -f /usr/share/zoneinfo/UTC ] && cp /usr/share/zoneinfo/UTC "$rootfs/usr/share/zoneinfo/"
  printf 'root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/nonexistent:/bin/sh\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
}

# numaflow_rs VERSION: Numaflow's Rust data plane, /bin/numaflow-rs and /bin/entrypoint. The
# versions share one target directory (most dependencies are the same builds), removed at the end.
numaflow_rs() {
  local NUMAFLOW_VERSION=$1
  local bins="$OUT/numaflow-rs-$NUMAFLOW_VERSION"
  [ -x "$bins/numaflow-rs" ] && [ -x "$bins/entrypoint" ] && return 0
  local moddir src t0
  t0=$(date +%s)
  moddir=$(go mod download -json "github.com/numaproj/numaflow@$NUMAFLOW_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
  [ -d "$moddir/rust" ] || die "no rust/ workspace in github.com/numaproj/numaflow@$NUMAFLOW_VERSION"
  src="$OUT/src-numaflow-$NUMAFLOW_VERSION"
  rm -rf "$src" && cp -r "$moddir/rust" "$src" && chmod -R u+w "$src"
  # The SDK from GitHub is a dev-dependency only (tests); GitHub is not reachable here.
  find "$src" -name Cargo.toml -exec sed -i '/numaflow-rs\.git/d' {} +
  log "numaflow-rs $NUMAFLOW_VERSION: building (cold: about 12 minutes on 2 cores)"
  (
    cd "$src"
    # Its rust-toolchain.toml names a channel rustup may not have: build with this project's.
    export RUSTUP_TOOLCHAIN="$TOOLCHAIN"
    export CARGO_TARGET_DIR="$OUT/target-numaflow" CARGO_INCREMENTAL=0
    # Lighter than Numaflow's release profile (fat LTO): opt-level 1, no debug info.
    export CARGO_PROFILE_QUICK_RELEASE_INCREMENTAL=false CARGO_PROFILE_QUICK_RELEASE_OPT_LEVEL=1
    export CARGO_PROFILE_QUICK_RELEASE_DEBUG=false
    export GIT_COMMIT="$NUMAFLOW_VERSION" GIT_TREE_STATE=clean GIT_TAG="$NUMAFLOW_VERSION"
    export VERSION="$NUMAFLOW_VERSION" BUILD_DATE=2026-01-01T00:00:00Z
    cargo build -q --profile quick-release -p numaflow
  )
  mkdir -p "$bins"
  cp "$OUT/target-numaflow/quick-release/numaflow" "$bins/numaflow-rs"
  cp "$OUT/target-numaflow/quick-release/entrypoint" "$bins/entrypoint"
  strip "$bins/numaflow-rs" "$bins/entrypoint"
  rm -rf "$src"
  log "numaflow-rs $NUMAFLOW_VERSION: built in $(( $(date +%s) - t0 ))s"
}

# numaflow_image VERSION
numaflow_image() {
  local NUMAFLOW_VERSION=$1
  local GO_NUMAFLOW="$CACHE_ROOT/realstack/numaflow-$NUMAFLOW_VERSION"
  local name="numaflow-$NUMAFLOW_VERSION"
  [ -f "$OUT/$name.oci.tar" ] && return 0
  local bins="$OUT/numaflow-rs-$NUMAFLOW_VERSION" root="$OUT/build-$name-root"
  rm -rf "$root" && mkdir -p "$root"
  base_files "$root"
  install -D -m 0755 "$GO_NUMAFLOW" "$root/bin/numaflow"
  copy_with_libs "$root" "$bins/numaflow-rs" /bin/numaflow-rs
  copy_with_libs "$root" "$bins/entrypoint" /bin/entrypoint
  oci_archive "$name" "quay.io/numaproj/numaflow:$NUMAFLOW_VERSION" "$root" /bin/entrypoint
  rm -rf "$root"
  log "image quay.io/numaproj/numaflow:$NUMAFLOW_VERSION packed"
}

# nats_image VERSION: the NATS server from github.com/nats-io/nats-server/v2.
nats_image() {
  local version=$1 name="nats-${1#v}"
  [ -f "$OUT/$name.oci.tar" ] && return 0
  go_build "$name" github.com/nats-io/nats-server/v2 "$version" github.com/nats-io/nats-server/v2
  local root="$OUT/build-$name-root"
  rm -rf "$root" && mkdir -p "$root/tmp"
  install -m 0755 "$OUT/$name" "$root/nats-server"
  oci_archive "$name" "docker.io/library/nats:${version#v}" "$root" /nats-server
  rm -rf "$root" "$OUT/$name"
  log "image nats:${version#v} packed"
}

# standin_image NAME REF COMMAND: Debian's static busybox with COMMAND on the PATH; the image's
# entrypoint and COMMAND both stay up until stopped, whatever their arguments.
standin_image() {
  local name=$1 ref=$2 cmd=$3
  [ -f "$OUT/$name.oci.tar" ] && return 0
  local root="$OUT/build-$name-root"
  rm -rf "$root" && mkdir -p "$root/bin" "$root/usr/local/bin" "$root/tmp"
  cp /bin/busybox "$root/bin/busybox"
  for a in sh sleep; do ln -s busybox "$root/bin/$a"; done
  printf '#!/bin/sh\n# numaplane test stand-in for %s: stays up, does nothing else.\nexec /bin/sleep 2147483647\n' "$ref" \
    >"$root/usr/local/bin/$cmd"
  chmod 0755 "$root/usr/local/bin/$cmd"
  oci_archive "$name" "$ref" "$root" "/usr/local/bin/$cmd"
  rm -rf "$root"
  log "stand-in image $ref packed"
}

counting_image() {
  local target="$OUT/target-counting" bin name=counting
  (
    cd "$ROOT/dataplane/counting"
    CARGO_TARGET_DIR="$target" CARGO_INCREMENTAL=0 cargo build -q --release --locked
  )
  bin="$target/release/numaplane-counting"
  if [ -f "$OUT/$name.oci.tar" ] && [ "$OUT/$name.oci.tar" -nt "$bin" ]; then return 0; fi
  local root="$OUT/build-$name-root"
  rm -rf "$root" && mkdir -p "$root"
  base_files "$root"
  copy_with_libs "$root" "$bin" /numaplane-counting
  oci_archive "$name" numaplane.local/counting:testenv "$root" /numaplane-counting
  rm -rf "$root"
  log "image numaplane.local/counting:testenv packed"
}

start=$(date +%s)
for v in $NATS_VERSIONS; do nats_image "$v"; done
standin_image nats-reloader docker.io/natsio/nats-server-config-reloader:0.7.0 nats-server-config-reloader
standin_image nats-exporter docker.io/natsio/prometheus-nats-exporter:0.9.1 prometheus-nats-exporter
counting_image
for v in $NUMAFLOW_VERSIONS; do numaflow_rs "$v"; numaflow_image "$v"; done
rm -rf "$OUT/target-numaflow"
log "ready in $(( $(date +%s) - start ))s: $OUT"
echo "$OUT"
