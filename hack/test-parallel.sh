#!/usr/bin/env bash
# Runs the workspace's test binaries (`cargo test --workspace --all-targets`), TEST_JOBS at once
# (default 2), and `make demo` beside them. Each integration binary starts one control plane for
# all its tests and mostly waits on it, so two binaries share two cores well; tests inside a
# binary keep cargo's own threading. Binaries on the real node (kubelet, containerd and real
# pods: the heaviest) never run two at a time. The slowest start first, so the pool ends evenly.
#
# Like `cargo test --no-fail-fast`: every binary runs; a failure prints that binary's whole
# output, and the exit status is non-zero if any failed. Every binary's output stays in
# ${CARGO_TARGET_DIR:-target}/test-logs/; the last lines are each binary's wall time, slowest
# first (docs: CONTRIBUTING.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
CARGO=${CARGO:-cargo}
JOBS=${TEST_JOBS:-2}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LOGS="$TARGET/test-logs"
rm -rf "$LOGS" && mkdir -p "$LOGS"

log() { printf '[test-parallel %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# Test binaries that run a real node: one at a time.
REAL_NODE=(dataplane install_real_node helm_chart migration real_node)
# The slowest binaries, slowest first (measured: CONTRIBUTING.md); the rest follow in build order.
SLOW=(demo scenarios_progressive scenarios_ppnd progressive dataplane chaos install_real_node
  hostile_input progressive_controller fail_closed pipeline_rollout invalid_input
  monovertex_rollout pause_requests migration helm_chart)

command -v jq >/dev/null || { log "jq missing: make testenv-binaries installs it"; exit 1; }

log "building every test target"
"$CARGO" test --workspace --all-targets --no-run --message-format=json-render-diagnostics \
  >"$LOGS/build.json"
# Test harness binaries (lib, bin, integration test, bench in test mode) with their package's
# directory, where cargo test runs each.
mapfile -t ARTIFACTS < <(jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
  | [.target.name + "(" + .target.kind[0] + ")", .executable, (.manifest_path | sub("/Cargo.toml$"; ""))] | @tsv' \
  "$LOGS/build.json")
[ ${#ARTIFACTS[@]} -gt 0 ] || { log "no test binaries found"; exit 1; }

declare -A EXE DIR
names=()
for a in "${ARTIFACTS[@]}"; do
  IFS=$'\t' read -r name exe dir <<<"$a"
  # Two packages may name a target alike (a lib's unit tests and its crate): keep both.
  [ -n "${EXE[$name]:-}" ] && name="$name@$(basename "$dir")"
  EXE[$name]=$exe DIR[$name]=$dir
  names+=("$name")
done
EXE[demo]=make DIR[demo]=$ROOT

# base NAME: the target's name without its kind.
base() { local n=${1%%(*}; echo "${n%%@*}"; }
is_real_node() { local b r; b=$(base "$1"); for r in "${REAL_NODE[@]}"; do [ "$b" = "$r" ] && return 0; done; return 1; }

queue=()
for s in "${SLOW[@]}"; do
  found=
  for n in demo "${names[@]}"; do [ "$(base "$n")" = "$s" ] && { queue+=("$n"); found=1; }; done
  [ -n "$found" ] || { log "SLOW names $s, which is no test binary: fix hack/test-parallel.sh"; exit 1; }
done
for n in "${names[@]}"; do
  case " ${queue[*]} " in *" $n "*) ;; *) queue+=("$n") ;; esac
done

declare -A PID_OF START
running=() failed=() durations=()
real_node_busy() { local n; for n in "${running[@]}"; do is_real_node "$n" && return 0; done; return 1; }

start_one() {
  local n=$1 logf="$LOGS/${1//[^A-Za-z0-9_.@-]/_}.log"
  START[$n]=$(date +%s)
  if [ "$n" = demo ]; then
    (cd "$ROOT" && exec make --no-print-directory demo) >"$logf" 2>&1 &
  else
    (cd "${DIR[$n]}" && CARGO_MANIFEST_DIR="${DIR[$n]}" exec "${EXE[$n]}") >"$logf" 2>&1 &
  fi
  PID_OF[$!]=$n
  running+=("$n")
}

finish_one() {
  local pid=$1 rc=$2 n=${PID_OF[$1]} logf
  logf="$LOGS/${n//[^A-Za-z0-9_.@-]/_}.log"
  local secs=$(( $(date +%s) - ${START[$n]} ))
  durations+=("$secs $n")
  local keep=() r
  for r in "${running[@]}"; do [ "$r" != "$n" ] && keep+=("$r"); done
  running=("${keep[@]+"${keep[@]}"}")
  if [ "$rc" -eq 0 ]; then
    log "ok $n (${secs}s): $(grep -h '^test result:' "$logf" | tail -n1)"
  else
    failed+=("$n")
    log "FAILED $n (${secs}s, exit $rc); its output:"
    cat "$logf"
    log "end of $n's output"
  fi
}

log "running ${#queue[@]} jobs, $JOBS at once (one real node at a time)"
while [ ${#queue[@]} -gt 0 ] || [ ${#running[@]} -gt 0 ]; do
  # Start what fits: the first queued job allowed beside those running.
  while [ ${#running[@]} -lt "$JOBS" ] && [ ${#queue[@]} -gt 0 ]; do
    pick=-1
    for i in "${!queue[@]}"; do
      if ! is_real_node "${queue[$i]}" || ! real_node_busy; then pick=$i; break; fi
    done
    [ "$pick" -ge 0 ] || break
    start_one "${queue[$pick]}"
    queue=("${queue[@]:0:$pick}" "${queue[@]:$((pick + 1))}")
  done
  set +e
  wait -n -p done_pid
  rc=$?
  set -e
  finish_one "$done_pid" "$rc"
done

log "wall time of each job, slowest first:"
printf '%s\n' "${durations[@]}" | sort -rn | awk '{printf "  %5ds  %s\n", $1, $2}'
if [ ${#failed[@]} -gt 0 ]; then
  log "FAILED: ${failed[*]}"
  exit 1
fi
log "all ${#durations[@]} jobs passed"
