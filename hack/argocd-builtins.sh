#!/usr/bin/env bash
# Fetches Argo CD's built-in Numaplane health checks (resource_customizations/numaplane.numaproj.io
# of the github.com/argoproj/argo-cd/v3 Go module: each kind's health.lua and its testdata), so
# that crates/cli/tests/argocd.rs can run them beside config/argocd on the same fixtures
# (docs/gitops.md). Nothing is built: the module's zip is downloaded from the Go module proxy
# (checked against the checksum database) and the files are extracted into a cache outside the
# repository:
#   ${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}/argocd-<version>/<Kind>/{health.lua,testdata/*.yaml}
# Idempotent. Prints the directory on the last line.
set -euo pipefail

ARGOCD_VERSION="${ARGOCD_VERSION:-v3.6.2}"
CACHE_ROOT="${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}"
OUT="$CACHE_ROOT/argocd-$ARGOCD_VERSION"
MODULE=github.com/argoproj/argo-cd/v3

log() { printf '[argocd-builtins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [ -f "$OUT/.complete" ]; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null || die "go is needed to download $MODULE@$ARGOCD_VERSION"
command -v unzip >/dev/null || { . "$(dirname "${BASH_SOURCE[0]}")/lib/gobuild.sh"; install_debs unzip; }
log "downloading $MODULE@$ARGOCD_VERSION (its zip only; nothing is built)"
# The module asks for a newer Go to build it, which `go mod download` reports as an error after
# the download; the zip it fetched and verified is all that is needed.
zip=$(go mod download -json "$MODULE@$ARGOCD_VERSION" 2>/dev/null | sed -n 's/.*"Zip": "\(.*\)",*/\1/p' || true)
[ -n "$zip" ] && [ -f "$zip" ] || die "could not download $MODULE@$ARGOCD_VERSION from the Go module proxy"
prefix="$MODULE@$ARGOCD_VERSION/resource_customizations/numaplane.numaproj.io"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unzip -q "$zip" "$prefix/*" -d "$work" || die "no $prefix in $zip"
rm -rf "$OUT" && mkdir -p "$OUT"
n=0
for dir in "$work/$prefix"/*/; do
  kind=$(basename "$dir")
  [ -f "$dir/health.lua" ] || continue
  mkdir -p "$OUT/$kind/testdata"
  cp "$dir/health.lua" "$OUT/$kind/health.lua"
  find "$dir/testdata" -name '*.yaml' -exec cp {} "$OUT/$kind/testdata/" \;
  n=$((n + 1))
done
[ "$n" -gt 0 ] || die "no health.lua under $prefix"
touch "$OUT/.complete"
log "$n kinds' health checks in $OUT"
echo "$OUT"
