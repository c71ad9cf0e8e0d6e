#!/usr/bin/env bash
# Coverage-guided fuzzing of the pure parsers (templating, configuration, permittedRiders rules,
# spec comparison) with cargo-fuzz and libFuzzer on the nightly toolchain, FUZZ_SECONDS per
# target. cargo-fuzz, its build and the corpora are cached outside the repository. A crash
# fails the run and leaves its input under fuzz/artifacts/<target>/. Figures: $1 (JSON).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/fuzz-parsers.json}
per_target=${FUZZ_SECONDS:-60}
cache=${NUMAPLANE_CACHE:-$HOME/.cache/numaplane}
log() { echo "[fuzz-parsers $(date +%H:%M:%S)] $*" >&2; }

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  log "installing the nightly toolchain (libFuzzer needs -Zsanitizer)"
  rustup toolchain install nightly --profile minimal
fi
if [ ! -x "$cache/tools/bin/cargo-fuzz" ]; then
  log "installing cargo-fuzz into $cache/tools (cold: a few minutes)"
  cargo install --locked --root "$cache/tools" cargo-fuzz
fi
export PATH="$cache/tools/bin:$PATH"
export CARGO_TARGET_DIR="$cache/fuzz-target"

results=()
for target in template config rider_rules usde_paths; do
  corpus="$cache/fuzz-corpus/$target"
  mkdir -p "$corpus"
  log "$target: ${per_target}s"
  logfile=$(mktemp)
  if ! cargo +nightly fuzz run "$target" "$corpus" -- \
      -max_total_time="$per_target" -print_final_stats=1 -seed=20261202 >"$logfile" 2>&1; then
    tail -40 "$logfile" >&2
    log "$target: FAILED (input under fuzz/artifacts/$target/)"
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logfile" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$logfile" | tail -1 | cut -d' ' -f2)
  files=$(find "$corpus" -type f | wc -l)
  log "$target: $runs runs, $cov coverage points, corpus of $files inputs, no crash"
  results+=("{\"target\": \"$target\", \"seconds\": $per_target, \"runs\": ${runs:-0}, \"coverage\": ${cov:-0}, \"corpus\": $files, \"crashes\": 0}")
  rm -f "$logfile"
done
( IFS=,; echo "[${results[*]}]" ) | python3 -m json.tool > "$out"
log "figures in $out"
