# Shared by the hack/*-binaries.sh and hack/dataplane-images.sh scripts: Go programs built from
# the Go module proxy in scratch modules outside the repository, and Debian packages installed
# when missing. The caller defines log (a message to stderr) and sets CACHE_ROOT (scratch
# modules) and OUT (where binaries go).

# go_build NAME MODULE VERSION PACKAGE [copy-replaces]
go_build() {
  local name=$1 module=$2 version=$3 pkg=$4 replaces=${5:-}
  [ -x "$OUT/$name" ] && return 0
  local work="$CACHE_ROOT/build-$name"
  local t0
  t0=$(date +%s)
  mkdir -p "$work"
  (
    cd "$work"
    if [ ! -f go.mod ] || ! grep -q "^require $module $version\$" go.mod; then
      log "$name: scratch module for $module@$version"
      rm -f go.mod go.sum tools.go
      printf 'module numaplane.local/build-%s\n\ngo 1.26\n\nrequire %s %s\n' "$name" "$module" "$version" > go.mod
      printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" > tools.go
      if [ -n "$replaces" ]; then
        local gomod
        gomod=$(go mod download -json "$module@$version" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
        [ -f "$gomod" ] || { log "could not download $module@$version"; exit 1; }
        # Both the one-line and the block form of `replace` in the module's go.mod.
        awk '/^replace \(/{b=1;next} b&&/^\)/{b=0;next} b{print "replace " $0; next} /^replace /{print}' \
          "$gomod" | grep -v '=> \.' >> go.mod || true
        log "$name: copied $(grep -c '^replace ' go.mod) replace directives"
      fi
      go mod tidy
    fi
    log "$name: building $pkg (cold: several minutes)"
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/$name.tmp" "$pkg"
    mv "$OUT/$name.tmp" "$OUT/$name"
  )
  log "$name: built in $(( $(date +%s) - t0 ))s"
}

# install_debs PACKAGE...: apt-get install of those not installed yet.
install_debs() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  apt-get update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
}
