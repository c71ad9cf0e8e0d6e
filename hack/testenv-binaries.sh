#!/usr/bin/env bash
# Builds the real control plane used by integration tests and the demo:
#   kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (for tests that drive the
#   cluster as the README tells a user to) from the k8s.io/kubernetes Go module,
#   etcd from Debian trixie's etcd-server package (3.5.x).
# Binaries land in a cache outside the repository, keyed by version:
#   ${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}/v<k8s>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,etcd}
# Idempotent: a binary that exists is not rebuilt. Prints the directory on the last line.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
CACHE_ROOT="${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}"
OUT="$CACHE_ROOT/$K8S_VERSION"
mkdir -p "$OUT"

log() { printf '[testenv-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

build_k8s() {
  local work="$CACHE_ROOT/build-$K8S_VERSION"
  local staging="v0.${K8S_VERSION#v1.}"
  mkdir -p "$work"
  cd "$work"
  if [ ! -f go.mod ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" go.mod \
    || ! grep -q cmd/kubectl tools.go 2>/dev/null; then
    log "creating scratch module in $work"
    rm -f go.mod go.sum
    cat > go.mod <<MOD
module numaplane.local/testenv-build

go 1.26
MOD
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    log "downloading k8s.io/kubernetes@$K8S_VERSION go.mod to find its staging modules"
    local kmod
    kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    [ -f "$kmod" ] || { log "could not download k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
    # Every k8s.io module that kubernetes pins at v0.0.0 is a staging module: pin it to the release.
    local mods
    mods=$(grep -oE '^\s*k8s\.io/[A-Za-z0-9._/-]+ v0\.0\.0(\s|$)' "$kmod" | awk '{print $1}' | sort -u)
    echo "require k8s.io/kubernetes $K8S_VERSION" >> go.mod
    for m in $mods; do
      echo "replace $m => $m $staging" >> go.mod
    done
    log "pinned $(echo "$mods" | wc -w) staging modules to $staging; go mod tidy"
    go mod tidy
  fi
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#v1.}"
  for cmd in "${K8S_CMDS[@]}"; do
    if [ ! -x "$OUT/$cmd" ]; then
      log "building $cmd $K8S_VERSION (cold: several minutes)"
      CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$OUT/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
      mv "$OUT/$cmd.tmp" "$OUT/$cmd"
    fi
  done
}

fetch_etcd() {
  local work="$CACHE_ROOT/apt-trixie"
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
  cat > "$work/sources.list" <<SRC
deb [trusted=yes] http://deb.debian.org/debian trixie main
SRC
  local opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
    -o "Dir::State::status=/dev/null" -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1")
  log "fetching etcd-server from Debian trixie"
  apt-get "${opts[@]}" update >/dev/null
  (cd "$work/debs" && apt-get "${opts[@]}" download etcd-server >/dev/null)
  local deb
  deb=$(ls "$work"/debs/etcd-server_*.deb | head -n1)
  rm -rf "$work/x" && dpkg-deb -x "$deb" "$work/x"
  # The package also ships /etc/init.d/etcd: take the binary by its path.
  local bin="$work/x/usr/bin/etcd"
  [ -x "$bin" ] || { log "no usr/bin/etcd in $deb"; exit 1; }
  cp "$bin" "$OUT/etcd.tmp" && mv "$OUT/etcd.tmp" "$OUT/etcd"
}

K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
all_built() { for c in "${K8S_CMDS[@]}"; do [ -x "$OUT/$c" ] || return 1; done; }
if all_built && [ -x "$OUT/etcd" ]; then
  log "cached: $OUT"
else
  start=$(date +%s)
  [ -x "$OUT/etcd" ] || fetch_etcd
  all_built || build_k8s
  log "done in $(( $(date +%s) - start ))s: $OUT"
fi
echo "$OUT"
