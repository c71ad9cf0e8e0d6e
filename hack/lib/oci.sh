# Shared by hack/realnode-binaries.sh and hack/dataplane-images.sh: OCI image archives built
# with Debian's umoci, without a registry. The caller sets OUT (where archives go).
# oci_archive NAME REF ROOTFS_DIR ENTRYPOINT... : an OCI image archive of ROOTFS_DIR named REF,
# as `ctr images import` reads it (the name in both index annotations).
oci_archive() {
  local name=$1 ref=$2 rootfs=$3
  shift 3
  local work="$OUT/build-$name"
  rm -rf "$work/oci" "$work/bundle"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:img"
  umoci unpack --image "$work/oci:img" "$work/bundle" >/dev/null
  cp -a "$rootfs/." "$work/bundle/rootfs/"
  umoci repack --image "$work/oci:img" "$work/bundle"
  local cfg=()
  for e in "$@"; do cfg+=(--config.entrypoint "$e"); done
  umoci config --image "$work/oci:img" "${cfg[@]}" --architecture amd64 --os linux
  umoci gc --layout "$work/oci"
  jq --arg r "$ref" '.manifests |= map(.annotations = {"org.opencontainers.image.ref.name": $r,
      "io.containerd.image.name": $r})' "$work/oci/index.json" > "$work/index.json"
  mv "$work/index.json" "$work/oci/index.json"
  tar -C "$work/oci" -cf "$OUT/$name.oci.tar.tmp" .
  mv "$OUT/$name.oci.tar.tmp" "$OUT/$name.oci.tar"
  echo "$ref" > "$OUT/$name.ref"
  rm -rf "$work"
}

