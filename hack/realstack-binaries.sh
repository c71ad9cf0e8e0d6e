#!/usr/bin/env bash
# Builds the real parts of the test world that are not the control plane itself:
#   the Numaflow controller (v1.8.1 and v1.7.5) from the github.com/numaproj/numaflow Go module,
#   KWOK from sigs.k8s.io/kwok,
#   the Argo Rollouts controller from github.com/argoproj/argo-rollouts (its replace directives
#   copied into the scratch module, as its own build needs them),
#   Prometheus and promtool from Debian trixie's `prometheus` and `promtool` packages,
#   Helm from helm.sh/helm/v4 (the chart's tests render and install charts/numaplane with it).
# Each is built from a scratch module of its own (no shared dependency graph, so no version
# conflicts) into a cache outside the repository:
#   ${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}/realstack/
#     numaflow-v1.8.1  numaflow-v1.7.5  kwok  rollouts-controller  prometheus  promtool  helm
# Idempotent: a binary that exists is not rebuilt. Prints the directory on the last line.
set -euo pipefail

NUMAFLOW_VERSIONS="${NUMAFLOW_VERSIONS:-v1.8.1 v1.7.5}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
ARGO_ROLLOUTS_VERSION="${ARGO_ROLLOUTS_VERSION:-v1.8.5}"
HELM_VERSION="${HELM_VERSION:-v4.3.2}"
CACHE_ROOT="${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}"
OUT="$CACHE_ROOT/realstack"
mkdir -p "$OUT"

log() { printf '[realstack-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# shellcheck source=hack/lib/gobuild.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/gobuild.sh"

fetch_prometheus() {
  [ -x "$OUT/prometheus" ] && [ -x "$OUT/promtool" ] && return 0
  local work="$CACHE_ROOT/apt-trixie"
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
  echo 'deb [trusted=yes] http://deb.debian.org/debian trixie main' > "$work/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
    -o "Dir::State::status=/dev/null" -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1")
  log "prometheus: fetching Debian trixie's package"
  apt-get "${opts[@]}" update >/dev/null
  # promtool (its own package, same source) checks and unit-tests the shipped alerting rules.
  local tool deb
  for tool in prometheus promtool; do
    (cd "$work/debs" && apt-get "${opts[@]}" download "$tool" >/dev/null)
    deb=$(ls "$work"/debs/"$tool"_*.deb | head -n1)
    rm -rf "$work/prom" && dpkg-deb -x "$deb" "$work/prom"
    [ -x "$work/prom/usr/bin/$tool" ] || { log "no usr/bin/$tool in $deb"; exit 1; }
    cp "$work/prom/usr/bin/$tool" "$OUT/$tool.tmp" && mv "$OUT/$tool.tmp" "$OUT/$tool"
  done
}

start=$(date +%s)
fetch_prometheus
for v in $NUMAFLOW_VERSIONS; do
  go_build "numaflow-$v" github.com/numaproj/numaflow "$v" github.com/numaproj/numaflow/cmd
done
go_build kwok sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
go_build rollouts-controller github.com/argoproj/argo-rollouts "$ARGO_ROLLOUTS_VERSION" \
  github.com/argoproj/argo-rollouts/cmd/rollouts-controller copy-replaces
go_build helm helm.sh/helm/v4 "$HELM_VERSION" helm.sh/helm/v4/cmd/helm
log "ready in $(( $(date +%s) - start ))s: $OUT"
echo "$OUT"
