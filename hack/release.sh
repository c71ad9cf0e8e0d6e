#!/usr/bin/env bash
# Builds the release artefacts of version $1 (the workspace version in Cargo.toml, with a section
# in CHANGELOG.md) into ${RELEASE_DIR:-dist}/v<version>/ (docs/install.md#releases):
#   install.yaml                                 the install, pinned to the image v<version>
#   numaplane-<version>.oci.tar                  the controller image (hack/image.sh)
#   kubectl-numaplane-v<version>-<os>-<arch>.tar.gz   the plugin, with LICENSE
#   sbom.cdx.json                                CycloneDX SBOM of the operator and the plugin
#   SHA256SUMS                                   checksums of the above
# Builds for the host's platform (the image is linux/amd64 on an amd64 host). Tools (cargo-cyclonedx)
# are installed once into the cache outside the repository.
set -euo pipefail
log() { printf '[release %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VERSION=${1:-}
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] \
  || die "usage: make release VERSION=x.y.z (semantic version, no leading v; got '${VERSION}')"
WORKSPACE=$(awk '/^\[workspace\.package\]/{s=1; next} /^\[/{s=0} s && $1=="version" {gsub(/"/, "", $3); print $3}' Cargo.toml)
[ "$WORKSPACE" = "$VERSION" ] || die "Cargo.toml's workspace version is $WORKSPACE, not $VERSION: set it, run make manifests and add a CHANGELOG.md section first"
grep -q "^## \[$VERSION\]" CHANGELOG.md || die "CHANGELOG.md has no '## [$VERSION]' section"
IMAGE_LINE=$(sed -n 's/^ *image: *//p' config/manager/manager.yaml)
[ "${IMAGE_LINE##*:}" = "v$VERSION" ] || die "config/manager/manager.yaml names $IMAGE_LINE: run make manifests"
grep -q "image: ${IMAGE_LINE}\$" config/install.yaml || die "config/install.yaml does not name $IMAGE_LINE: run make manifests"
if [ -n "$(git status --porcelain 2>/dev/null)" ] && [ "${RELEASE_ALLOW_DIRTY:-0}" != 1 ]; then
  die "the working tree has changes: commit them (or RELEASE_ALLOW_DIRTY=1 for a trial run)"
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
CARGO=${CARGO:-cargo}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
OUT="${RELEASE_DIR:-$ROOT/dist}/v$VERSION"
rm -rf "$OUT"
mkdir -p "$OUT"
t0=$(date +%s)

log "building numaplane and kubectl-numaplane (release)"
$CARGO build --release --locked -p numaplane --bin numaplane -p kubectl-numaplane --bin kubectl-numaplane
BIN="$TARGET_DIR/release"
"$BIN/numaplane" --version | grep -q "$VERSION" || die "numaplane --version does not say $VERSION"
"$BIN/kubectl-numaplane" version --client | grep -q "$VERSION" || die "kubectl-numaplane version does not say $VERSION"

log "install.yaml"
cp config/install.yaml "$OUT/install.yaml"

log "the image"
NUMAPLANE_IMAGE_BIN="$BIN/numaplane" NUMAPLANE_IMAGE_OUT="$OUT" CARGO="$CARGO" ./hack/image.sh >"$OUT/.image-digest"
[ -f "$OUT/numaplane-$VERSION.oci.tar" ] || die "hack/image.sh left no $OUT/numaplane-$VERSION.oci.tar"

log "the plugin archive"
os=$(uname -s | tr '[:upper:]' '[:lower:]')
arch=$(uname -m); case "$arch" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; esac
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$BIN/kubectl-numaplane" LICENSE "$stage/"
plugin="kubectl-numaplane-v$VERSION-$os-$arch.tar.gz"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
  -C "$stage" -cf - kubectl-numaplane LICENSE | gzip -n >"$OUT/$plugin"

log "the SBOM"
cache=${NUMAPLANE_CACHE:-$HOME/.cache/numaplane}
cyclonedx_version=0.5.9
if ! "$cache/tools/bin/cargo-cyclonedx" --version 2>/dev/null | grep -q "$cyclonedx_version"; then
  log "installing cargo-cyclonedx $cyclonedx_version into $cache/tools (cold: a few minutes)"
  $CARGO install --locked --root "$cache/tools" --version "$cyclonedx_version" cargo-cyclonedx
fi
# cargo-cyclonedx writes one file into every workspace member's directory: the operator's and the
# plugin's are merged, all are removed.
sbom_name=numaplane-release-sbom
trap 'rm -rf "$stage"; rm -f crates/*/"$sbom_name".json' EXIT
"$cache/tools/bin/cargo-cyclonedx" cyclonedx --format json --spec-version 1.5 \
  --override-filename "$sbom_name" >/dev/null
jq -s '.[0] + {components: ((.[0].components // []) + (.[1].components // []) | unique_by(.purl))}' \
  "crates/controller/$sbom_name.json" "crates/cli/$sbom_name.json" >"$OUT/sbom.cdx.json"
rm -f crates/*/"$sbom_name".json
jq -e '.bomFormat == "CycloneDX" and (.components | length) > 100' "$OUT/sbom.cdx.json" >/dev/null \
  || die "the SBOM lists no components"

log "checksums"
digest=$(tail -1 "$OUT/.image-digest"); rm -f "$OUT/.image-digest"
(cd "$OUT" && sha256sum install.yaml "numaplane-$VERSION.oci.tar" "$plugin" sbom.cdx.json >SHA256SUMS \
  && sha256sum --quiet -c SHA256SUMS)
log "v$VERSION in $OUT ($(( $(date +%s) - t0 )) s); image manifest $digest"
ls -l "$OUT" >&2
