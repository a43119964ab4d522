#!/usr/bin/env bash
# Instructions per forwarded request, counted by valgrind's callgrind: a regression check that
# timing noise on a shared machine cannot blur.
#
#   bench/callgrind.sh                 # Legacy and Modern, N=2000 over 8 workers, ~2 minutes
#   CG_N=500 bench/callgrind.sh        # quicker, a little less steady
#   CG_ANNOTATE=1 bench/callgrind.sh   # also print the top functions per request
#   CG_BIN=/path/to/switchboard bench/callgrind.sh   # measure that release binary, build nothing
#   CG_GW_ARGS='--guardrails F' CG_BENCH_ARGS='--tool leak --args {...}' bench/callgrind.sh
#                                      # gateway and driver options (bench/guardrails.sh)
#
# Method: the release gateway (`[profile.release]` keeps line tables, enough for callgrind to
# name functions and lines) runs under callgrind in front of the built-in stdio fixture, which
# runs natively (children are not traced): only the gateway's instructions are counted. The
# driver (`switchboard bench`, native) opens 8 Legacy sessions, sends its probe, then N verified
# `tools/call echo` requests, 8 in flight, and DELETEs the sessions. The same is done with one
# request; the difference of the two totals over N-1 is the cost of one forwarded request,
# with startup, session setup and shutdown cancelled out. Modern: the same with stateless
# requests. Not exactly deterministic (how many requests share one wake-up, one `write` or
# one poll depends on timing), typically within ±1 % between runs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
N=${CG_N:-2000}
CONC=${CG_CONC:-8}
OUT=${CG_OUT:-$ROOT/target/callgrind}
mkdir -p "$OUT"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ "$N" -ge 2 ] || { echo "CG_N must be at least 2" >&2; exit 1; }

if [ -n "${CG_BIN:-}" ]; then
  SB=$CG_BIN # a release binary built elsewhere (another commit, when bisecting)
else
  echo "building release…" >&2
  cargo build --release -q -p switchboard
  SB=$ROOT/target/release/switchboard
fi

GW_PID=""
cleanup() { [ -n "$GW_PID" ] && kill "$GW_PID" 2>/dev/null || true; }
trap cleanup EXIT

# measure NAME REQUESTS [bench args…]: total instructions of one gateway lifetime serving
# REQUESTS measured requests; the callgrind file is $OUT/NAME.out.
measure() {
  local name=$1 n=$2; shift 2
  rm -f "$OUT/$name.out"
  valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.out" \
    "$SB" run --host 127.0.0.1 --port 0 ${CG_GW_ARGS:-} >"$OUT/$name.gw.out" 2>"$OUT/$name.gw.err" &
  GW_PID=$!
  local url=""
  for _ in $(seq 600); do
    url=$(sed -n 's/^switchboard: listening on //p' "$OUT/$name.gw.out")
    [ -n "$url" ] && break
    kill -0 "$GW_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "gateway did not start under valgrind:" >&2; cat "$OUT/$name.gw.err" >&2; exit 1; }
  # Generous timeout: everything runs ~50× slower under callgrind.
  # shellcheck disable=SC2086 # word splitting of the option lists is meant
  "$SB" bench --url "$url" --requests "$n" --concurrency "$CONC" --warmup 0 --timeout 120 \
    --json ${CG_BENCH_ARGS:-} "$@" >"$OUT/$name.json" 2>"$OUT/$name.err" ||
    { echo "bench failed ($name):" >&2; tail -3 "$OUT/$name.err" >&2; exit 1; }
  jq -e '.errors == 0 and .wrong_answers == 0' "$OUT/$name.json" >/dev/null ||
    { echo "bench $name had errors or wrong answers: $(cat "$OUT/$name.json")" >&2; exit 1; }
  kill -TERM "$GW_PID"
  wait "$GW_PID" || true
  GW_PID=""
  # `totals:` (or `summary:`) is the whole process's Ir.
  awk '/^(totals|summary):/ {print $2; exit}' "$OUT/$name.out"
}

row() {
  local label=$1 era=$2; shift 2
  local base full
  base=$(measure "$era-1" 1 "$@")
  full=$(measure "$era-$N" "$N" "$@")
  echo "| $label | $N | $base | $full | **$(( (full - base) / (N - 1) ))** |"
}

echo "## Instructions per forwarded request (callgrind) — $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')"
echo
echo "| workload ($CONC in flight, tools/call echo) | N | Ir, 1 request | Ir, N requests | Ir / request |"
echo "|---|---:|---:|---:|---:|"
row "Legacy, $CONC sessions" legacy --sessions "$CONC"
row "Modern stateless" modern --era modern

if [ -n "${CG_ANNOTATE:-}" ]; then
  for era in legacy modern; do
    echo
    echo "### $era: top exclusive cost (whole run of $N; divide by $N for per request)"
    callgrind_annotate "$OUT/$era-$N.out" 2>/dev/null | sed -n '/file:function/,$p' | head -40
    echo
    echo "### $era: top inclusive cost"
    callgrind_annotate --inclusive=yes "$OUT/$era-$N.out" 2>/dev/null | sed -n '/file:function/,$p' | head -60
  done
fi
