#!/usr/bin/env bash
# Builds the controller image as an OCI archive, without Docker and without remote base images:
# the release binary on a minimal root filesystem cut from Debian packages (docs/image.md).
#   ${CARGO_TARGET_DIR:-target}/image/numaplane-<version>.oci.tar
# Reproducible: the same binary and the same .debs give the same manifest digest (every mtime is
# SOURCE_DATE_EPOCH, the commit time by default; entries sorted; no gzip timestamps; fixed
# `created`). Prints the manifest digest on the last line.
#
# Environment:
#   NUMAPLANE_IMAGE_BIN      use this binary instead of running the release build
#   NUMAPLANE_IMAGE_OUT      output directory (default ${CARGO_TARGET_DIR:-target}/image)
#   NUMAPLANE_IMAGE_NAME     repository (default: the one config/manager/manager.yaml names)
#   NUMAPLANE_IMAGE_TAG      tag (default v<version>, the one config/manager/manager.yaml names)
#   NUMAPLANE_IMAGE_CACHE    where the .debs are kept (default ~/.cache/numaplane/image)
#   NUMAPLANE_IMAGE_SUITE    Debian suite of the base (default: the build host's, whose glibc
#                            the binary was linked against)
#   NUMAPLANE_IMAGE_REFRESH  1: resolve the .debs again (security updates); otherwise the cached
#                            ones are reused, so a rebuild is offline and gives the same digest
set -euo pipefail

log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
t0=$(date +%s)

# ---- prerequisites: Debian's own tools, installed like hack/browser.sh does --------------------
need=()
command -v umoci >/dev/null || need+=(umoci)
command -v readelf >/dev/null || need+=(binutils)
command -v dpkg-deb >/dev/null || need+=(dpkg)
command -v jq >/dev/null || need+=(jq)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "need root or sudo to apt-get install ${need[*]}"
    SUDO="sudo"
  fi
  log "installing ${need[*]} from Debian's packages"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---- identity: version from Cargo.toml, name from the manifests, revision from git -------------
VERSION=$(awk '/^\[workspace\.package\]/{s=1; next} /^\[/{s=0} s && $1=="version" {gsub(/"/, "", $3); print $3}' Cargo.toml)
[ -n "$VERSION" ] || die "no [workspace.package] version in Cargo.toml"
TAG="v$VERSION"
# config/manager/manager.yaml's image line is written by `make manifests` from the same version.
MANIFEST_REF=$(sed -n 's/^ *image: *//p' config/manager/manager.yaml)
[ "$(printf '%s\n' "$MANIFEST_REF" | wc -l)" = 1 ] && [ -n "$MANIFEST_REF" ] \
  || die "config/manager/manager.yaml must hold exactly one image: line"
NAME="${NUMAPLANE_IMAGE_NAME:-${MANIFEST_REF%:*}}"
[ "${MANIFEST_REF##*:}" = "$TAG" ] \
  || die "config/manager/manager.yaml names $MANIFEST_REF, not tag $TAG: run make manifests"
# Another tag for the same build (a test's stand-in for the next release of the operator).
TAG="${NUMAPLANE_IMAGE_TAG:-$TAG}"
# The revision is the commit; a tree with uncommitted changes to tracked files adds "-dirty"
# (untracked files are ignored); outside a git checkout it is "unknown".
if REVISION=$(git rev-parse HEAD 2>/dev/null); then
  git diff --quiet HEAD -- 2>/dev/null || REVISION="$REVISION-dirty"
  SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
else
  REVISION=unknown
  SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-0}"
fi
export SOURCE_DATE_EPOCH
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
SOURCE=$(awk '/^\[workspace\.package\]/{s=1; next} /^\[/{s=0} s && $1=="repository" {gsub(/"/, "", $3); print $3}' Cargo.toml)
DEB_ARCH=$(dpkg --print-architecture)
case "$DEB_ARCH" in
  amd64 | arm64) OCI_ARCH="$DEB_ARCH" ;;
  *) die "no OCI architecture mapping for Debian's $DEB_ARCH" ;;
esac

# ---- the binary --------------------------------------------------------------------------------
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
if [ -n "${NUMAPLANE_IMAGE_BIN:-}" ]; then
  BIN="$NUMAPLANE_IMAGE_BIN"
else
  log "cargo build --release --locked -p numaplane --bin numaplane"
  "${CARGO:-cargo}" build --release --locked -p numaplane --bin numaplane
  BIN="$TARGET_DIR/release/numaplane"
fi
[ -x "$BIN" ] || die "no executable $BIN"

# ---- the Debian packages, cached outside the repository ------------------------------------------
SUITE="${NUMAPLANE_IMAGE_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-}")}"
[ -n "$SUITE" ] || die "cannot tell the Debian suite (no VERSION_CODENAME): set NUMAPLANE_IMAGE_SUITE"
CACHE="${NUMAPLANE_IMAGE_CACHE:-$HOME/.cache/numaplane/image}/$SUITE-$DEB_ARCH"
# glibc (libc6) and libgcc_s (libgcc-s1, Rust's unwinder) are what the binary links; the
# CA bundle (ca-certificates) is what kube's rustls trusts when a kubeconfig names no CA; the
# os-release of base-files lets image scanners identify the base. No tzdata: nothing reads
# local time. gcc-*-base only supplies libgcc-s1's copyright file.
PACKAGES=(libc6 libgcc-s1 ca-certificates base-files)
DEBS="$CACHE/debs"
mkdir -p "$CACHE"
# Two builds at once (make image beside make test) share the cache: one at a time (until exit).
exec 9>"$CACHE/.lock"
flock 9
if [ "${NUMAPLANE_IMAGE_REFRESH:-0}" = 1 ] || [ ! -f "$DEBS/.complete" ]; then
  log "resolving ${PACKAGES[*]} from Debian $SUITE"
  mkdir -p "$CACHE/lists/partial" "$CACHE/cache/archives/partial"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  cat >"$CACHE/sources.list" <<SRC
deb [signed-by=$keyring] http://deb.debian.org/debian $SUITE main
deb [signed-by=$keyring] http://deb.debian.org/debian $SUITE-updates main
deb [signed-by=$keyring] http://deb.debian.org/debian-security $SUITE-security main
SRC
  opts=(-o "Dir::Etc::SourceList=$CACHE/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$CACHE/lists" -o "Dir::Cache=$CACHE/cache"
    -o "Dir::State::status=/dev/null" -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1"
    -o "APT::Architecture=$DEB_ARCH" -o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" -qq update
  gccbase=$(apt-cache "${opts[@]}" depends libgcc-s1 | awk '$1=="Depends:" && $2 ~ /^gcc-[0-9]+-base$/ {print $2; exit}')
  [ -n "$gccbase" ] || die "cannot find the gcc-*-base package libgcc-s1 depends on"
  rm -rf "$DEBS.tmp" && mkdir -p "$DEBS.tmp"
  (cd "$DEBS.tmp" && apt-get "${opts[@]}" -qq download "${PACKAGES[@]}" "$gccbase" >/dev/null)
  printf '%s\n' "${PACKAGES[@]}" "$gccbase" >"$DEBS.tmp/.complete"
  rm -rf "$DEBS" && mv "$DEBS.tmp" "$DEBS"
fi
mapfile -t DEB_FILES < <(LC_ALL=C ls "$DEBS"/*.deb)
[ ${#DEB_FILES[@]} -eq "$(wc -l <"$DEBS/.complete")" ] || die "$DEBS is incomplete: rerun with NUMAPLANE_IMAGE_REFRESH=1"

# ---- the root filesystem: only what the binary needs -------------------------------------------
OUT="${NUMAPLANE_IMAGE_OUT:-$TARGET_DIR/image}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$OUT/work"
rm -rf "$WORK" && mkdir -p "$WORK/full" "$WORK/rootfs"
FULL="$WORK/full" ROOTFS="$WORK/rootfs"
for deb in "${DEB_FILES[@]}"; do dpkg-deb -x "$deb" "$FULL"; done

# Prints every symlink met while resolving absolute path $1 inside $FULL, then the final path.
resolve() {
  local cur="" rest="${1#/}" comp target hops=0
  while [ -n "$rest" ]; do
    comp="${rest%%/*}"
    if [ "$comp" = "$rest" ]; then rest=""; else rest="${rest#*/}"; fi
    case "$comp" in
      "" | .) continue ;;
      ..) cur="${cur%/*}"; continue ;;
    esac
    if [ -L "$FULL$cur/$comp" ]; then
      echo "$cur/$comp"
      hops=$((hops + 1))
      [ "$hops" -lt 40 ] || die "symlink loop resolving $1"
      target=$(readlink "$FULL$cur/$comp")
      case "$target" in
        /*) cur=""; rest="${target#/}${rest:+/$rest}" ;;
        *) rest="$target${rest:+/$rest}" ;;
      esac
    else
      cur="$cur/$comp"
    fi
  done
  echo "$cur"
}
keep=()
keep_path() { local p; while read -r p; do keep+=("$p"); done < <(resolve "$1"); }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# The program interpreter and every shared library the binary needs, transitively, as Debian
# ships them (with the symlinks leading to them).
interp=$(readelf -l "$BIN" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[ -n "$interp" ] || die "$BIN has no program interpreter (a static binary needs no base: adapt this script)"
keep_path "$interp"
[ -f "$FULL${keep[-1]}" ] || die "the interpreter $interp is not in ${DEB_FILES[*]}"
declare -A seen=()
queue=("$BIN")
while [ ${#queue[@]} -gt 0 ]; do
  obj="${queue[0]}"; queue=("${queue[@]:1}")
  for so in $(needed "$obj"); do
    [ -z "${seen[$so]:-}" ] || continue
    seen[$so]=1
    found=""
    for dir in "$FULL"/lib/*-linux-gnu "$FULL"/usr/lib/*-linux-gnu "$FULL"/{lib64,usr/lib64,lib,usr/lib}; do
      if [ -e "$dir/$so" ]; then found="${dir#"$FULL"}/$so"; break; fi
    done
    [ -n "$found" ] || die "$obj needs $so, which no package in PACKAGES supplies"
    keep_path "$found"
    queue+=("$FULL${keep[-1]}")
  done
done
log "libraries: ${!seen[*]}"
# Copyright notices of the packages shipped (the licenses ask for them), the os-release files.
for deb in "${DEB_FILES[@]}"; do
  pkg=$(dpkg-deb -f "$deb" Package)
  keep_path "/usr/share/doc/$pkg/copyright"
  [ -f "$FULL${keep[-1]}" ] || die "$pkg ships no copyright file"
done
keep_path /etc/os-release
keep_path /usr/lib/os-release
keep_path /etc/debian_version
for p in "${keep[@]}"; do
  [ -e "$FULL$p" ] || [ -L "$FULL$p" ] || die "missing $p in the extracted packages"
  (cd "$FULL" && cp -a --parents ".$p" "$ROOTFS/")
done
# The CA bundle update-ca-certificates would write (postinst scripts do not run here).
mkdir -p "$ROOTFS/etc/ssl/certs"
for crt in $(cd "$FULL/usr/share/ca-certificates" && LC_ALL=C ls mozilla/*.crt); do
  sed -e '$a\' "$FULL/usr/share/ca-certificates/$crt"
done >"$ROOTFS/etc/ssl/certs/ca-certificates.crt"
[ -s "$ROOTFS/etc/ssl/certs/ca-certificates.crt" ] || die "empty CA bundle"
# What the packages are, where image scanners look for them (one control paragraph each).
mkdir -p "$ROOTFS/var/lib/dpkg/status.d"
for deb in "${DEB_FILES[@]}"; do
  pkg=$(dpkg-deb -f "$deb" Package)
  dpkg-deb -f "$deb" | sed '/^Package:/a Status: install ok installed' >"$ROOTFS/var/lib/dpkg/status.d/$pkg"
done
# The non-root user the Deployment runs as (65532, as the Dockerfile's distroless base has it).
cat >"$ROOTFS/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin
EOF
cat >"$ROOTFS/etc/group" <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
# glibc's defaults without this file put DNS before /etc/hosts.
cat >"$ROOTFS/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
mkdir -p "$ROOTFS/tmp"
install -m 0755 "$BIN" "$ROOTFS/numaplane"
find "$ROOTFS" -type d -exec chmod 0755 {} +
chmod 1777 "$ROOTFS/tmp"
find "$ROOTFS" -type f -exec chmod go-w {} +

# ---- the OCI layout ------------------------------------------------------------------------------
# One layer, written by GNU tar with fixed order, owners and times; umoci compresses it (Go's gzip
# writes no timestamp) and writes config, manifest and index.
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  --format=gnu -C "$ROOTFS" -cf "$WORK/layer.tar" .
LAYOUT="$WORK/layout"
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$TAG"
umoci raw add-layer --image "$LAYOUT:$TAG" --history.created "$CREATED" \
  --history.created_by "hack/image.sh: Debian $SUITE ${PACKAGES[*]} (pruned) + /numaplane" \
  "$WORK/layer.tar"
# Entrypoint, user and ports are the Dockerfile's (a test compares them).
umoci config --image "$LAYOUT:$TAG" --no-history --created "$CREATED" \
  --architecture "$OCI_ARCH" --os linux \
  --config.entrypoint /numaplane --config.user 65532:65532 \
  --config.exposedports 8080/tcp --config.exposedports 8081/tcp \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --config.label "org.opencontainers.image.title=numaplane" \
  --config.label "org.opencontainers.image.description=Numaplane controller: deploys and upgrades Numaflow pipelines" \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --config.label "org.opencontainers.image.revision=$REVISION" \
  --config.label "org.opencontainers.image.source=$SOURCE" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0" \
  --config.label "org.opencontainers.image.created=$CREATED"
umoci gc --layout "$LAYOUT"
# The full name beside the tag, for `ctr images import` (index.json is not content-addressed:
# the manifest digest stays the same).
jq -c --arg name "$NAME:$TAG" '.manifests[0].annotations["io.containerd.image.name"] = $name' \
  "$LAYOUT/index.json" >"$LAYOUT/index.json.tmp"
mv "$LAYOUT/index.json.tmp" "$LAYOUT/index.json"
find "$LAYOUT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
ARCHIVE="$OUT/numaplane-$VERSION.oci.tar"
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --mode=a+rX,u+w \
  --format=gnu -C "$LAYOUT" -cf "$ARCHIVE.tmp" oci-layout index.json blobs
mv "$ARCHIVE.tmp" "$ARCHIVE"
DIGEST=$(jq -r '.manifests[0].digest' "$LAYOUT/index.json")
rm -rf "$WORK"
log "$NAME:$TAG ($(du -h "$ARCHIVE" | cut -f1), revision $REVISION) in $(($(date +%s) - t0))s: $ARCHIVE"
echo "$DIGEST"
