#!/usr/bin/env bash
# Checks the dependency graph against deny.toml with cargo-deny: licences, bans and sources by
# default (all offline), DENY_CHECKS to choose (`advisories` needs the RustSec database from the
# network). cargo-deny is installed once into the cache outside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${NUMAPLANE_CACHE:-$HOME/.cache/numaplane}
version=0.20.2
log() { echo "[deny $(date +%H:%M:%S)] $*" >&2; }
if ! "$cache/tools/bin/cargo-deny" --version 2>/dev/null | grep -q " $version\$"; then
  log "installing cargo-deny $version into $cache/tools (cold: a few minutes)"
  cargo install --locked --root "$cache/tools" --version "$version" cargo-deny
fi
# cargo-deny reads the whole graph offline, the crates of every platform included (not only the
# ones this host builds): fetch them first, or a new machine fails on a crate it never needed.
cargo fetch --locked -q
cargo fetch --locked -q --manifest-path dataplane/counting/Cargo.toml
checks=${DENY_CHECKS:-licenses bans sources}
# shellcheck disable=SC2086
"$cache/tools/bin/cargo-deny" --locked --offline check $checks
# The counting source and sink of the data-plane suite: a project of its own, the same rules
# (licences the workspace allows and it does not use are no finding there).
# shellcheck disable=SC2086
"$cache/tools/bin/cargo-deny" --manifest-path dataplane/counting/Cargo.toml --config deny.toml \
  --locked --offline check -A license-not-encountered $checks
