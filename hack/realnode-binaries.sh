#!/usr/bin/env bash
# Builds what the test environment's real node needs (docs/real-node.md):
#   kubelet and kube-proxy from the k8s.io/kubernetes Go module (the same pinning as hack/testenv-binaries.sh, in
#   a scratch module of its own so that the control plane's module is left alone);
#   CoreDNS from the github.com/coredns/coredns Go module (cluster DNS on the node);
#   crane from the github.com/google/go-containerregistry Go module (the node's image registry,
#   `crane registry serve`, and the push into it);
#   containerd, runc, the CNI plugins, iptables (for kube-proxy), umoci and busybox-static from
#   Debian (apt-get install when
#   missing);
#   two OCI image archives built without a registry: the pod sandbox image
#   (registry.k8s.io/pause:<tag>, a `gcc -static` build of build/pause/linux/pause.c from the
#   Kubernetes module) and numaplane.local/busybox:testenv (Debian's static busybox) for tests.
# Outputs, outside the repository:
#   ${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}/<k8s>/{kubelet,kube-proxy}
#   ${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}/realnode/{pause,busybox}.oci.tar, coredns, crane
# Idempotent: what exists is not rebuilt. Prints the realnode directory on the last line.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.7}"
GGCR_VERSION="${GGCR_VERSION:-v0.22.1}"
CACHE_ROOT="${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}"
BIN="$CACHE_ROOT/$K8S_VERSION"
OUT="$CACHE_ROOT/realnode"
mkdir -p "$BIN" "$OUT"

log() { printf '[realnode-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=hack/lib/gobuild.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/gobuild.sh"

# Debian packages and the commands each must provide.
DEBS=(containerd runc containernetworking-plugins umoci busybox-static iptables iproute2 jq gcc libc6-dev)
NEEDED=(/usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/bin/ctr /usr/sbin/runc
  /usr/sbin/iptables-restore /usr/bin/gcc /usr/bin/jq /usr/sbin/ip /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/bin/umoci /bin/busybox)

debian_packages() {
  # The test environment runs a containerd of its own (own root, state and socket); one the
  # package may start as a system service is not used.
  install_debs "${DEBS[@]}"
  for f in "${NEEDED[@]}"; do [ -x "$f" ] || die "$f missing after installing ${DEBS[*]}"; done
  # gcc -static needs libc.a; -print-file-name answers a bare name when it has none.
  gcc -print-file-name=libc.a | grep -q / || die "no libc.a for gcc -static (libc6-dev)"
}

# build_node_cmd CMD: kubelet or kube-proxy.
build_node_cmd() {
  local cmd=$1
  [ -x "$BIN/$cmd" ] && return 0
  local work="$CACHE_ROOT/build-node-$K8S_VERSION"
  local staging="v0.${K8S_VERSION#v1.}"
  local t0
  t0=$(date +%s)
  mkdir -p "$work"
  (
    cd "$work"
    if [ ! -f go.mod ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" go.mod; then
      log "$cmd: scratch module in $work"
      rm -f go.mod go.sum
      printf 'module numaplane.local/testenv-node-build\n\ngo 1.26\n' > go.mod
      printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n\t_ "k8s.io/kubernetes/cmd/kube-proxy"\n)\n' > tools.go
      local kmod mods
      kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
      [ -f "$kmod" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION"
      # Staging modules are pinned at v0.0.0 by kubernetes: pin them to the release.
      mods=$(grep -oE '^\s*k8s\.io/[A-Za-z0-9._/-]+ v0\.0\.0(\s|$)' "$kmod" | awk '{print $1}' | sort -u)
      echo "require k8s.io/kubernetes $K8S_VERSION" >> go.mod
      for m in $mods; do echo "replace $m => $m $staging" >> go.mod; done
      go mod tidy
    fi
    local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#v1.}"
    log "$cmd: building $K8S_VERSION (cold: several minutes)"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  )
  log "$cmd: built in $(( $(date +%s) - t0 ))s"
}

# shellcheck source=hack/lib/oci.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/oci.sh"

pause_image() {
  [ -f "$OUT/pause.oci.tar" ] && [ -f "$OUT/pause.ref" ] && return 0
  local kdir src tag
  kdir=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
  src="$kdir/build/pause/linux/pause.c"
  [ -f "$src" ] || die "no $src in the k8s.io/kubernetes module"
  tag=$(sed -n 's/^TAG ?= *//p' "$kdir/build/pause/Makefile")
  [ -n "$tag" ] || die "no TAG in $kdir/build/pause/Makefile"
  local root="$OUT/build-pause-root"
  rm -rf "$root" && mkdir -p "$root"
  gcc -Os -static -Wall -Werror -DVERSION="v$tag-numaplane" -o "$root/pause" "$src"
  strip "$root/pause"
  oci_archive pause "registry.k8s.io/pause:$tag" "$root" /pause
  rm -rf "$root"
  log "pause image registry.k8s.io/pause:$tag packed"
}

busybox_image() {
  [ -f "$OUT/busybox.oci.tar" ] && [ -f "$OUT/busybox.ref" ] && return 0
  local root="$OUT/build-busybox-root"
  rm -rf "$root" && mkdir -p "$root/bin" "$root/tmp"
  cp /bin/busybox "$root/bin/busybox"
  for a in sh echo cat ls sleep wget nc hostname ip nslookup true env; do ln -s busybox "$root/bin/$a"; done
  oci_archive busybox numaplane.local/busybox:testenv "$root" /bin/sh
  rm -rf "$root"
  log "busybox image numaplane.local/busybox:testenv packed"
}

start=$(date +%s)
debian_packages
build_node_cmd kubelet
build_node_cmd kube-proxy
# Cluster DNS for the node; the node's registry and its client.
go_build coredns github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns
go_build crane github.com/google/go-containerregistry "$GGCR_VERSION" github.com/google/go-containerregistry/cmd/crane
pause_image
busybox_image
log "ready in $(( $(date +%s) - start ))s: $OUT (kubelet in $BIN)"
echo "$OUT"
