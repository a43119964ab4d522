#!/usr/bin/env bash
# Guardrails' cost, side by side with guardrails off: (a) configured but covering no tool of
# the request, (b) the built-in secrets scanner on 4 KiB and 1 MiB results. The results are
# the fixture's `leak` tool with `kind: filler` (plain text that matches nothing).
#
# Two halves, each a ratio within one run:
#   - instructions per forwarded request (callgrind, as bench/callgrind.sh), both eras;
#   - requests per second (`switchboard bench`, native, Modern, GR_SECONDS each).
#
#   bench/guardrails.sh        # release build; CG_N=2000 (4 KiB) and CG_N_LARGE=CG_N (1 MiB)
#   CG_BIN=… bench/guardrails.sh   # measure that release binary, build nothing
#   GR_SKIP_CALLGRIND=1 …          # only the requests per second
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if [ -z "${CG_BIN:-}" ]; then
  cargo build --release -q -p switchboard
  export CG_BIN=$ROOT/target/release/switchboard
fi
N=${CG_N:-2000}
N_LARGE=${CG_N_LARGE:-$N}
SECONDS_EACH=${GR_SECONDS:-5}

gw_args() {
  [ "$1" = off ] || echo "--guardrails $ROOT/bench/guardrails/$1.yaml"
}

if [ -z "${GR_SKIP_CALLGRIND:-}" ]; then
echo "## Instructions per request (callgrind)"
for size in 4096 1048576; do
  n=$N
  [ "$size" -lt 1048576 ] || n=$N_LARGE
  args="--tool leak --args {\"kind\":\"filler\",\"bytes\":$size}"
  echo "### results of $size bytes"
  for cfg in off nomatch secrets; do
    echo "#### guardrails: $cfg"
    CG_N=$n CG_GW_ARGS="$(gw_args "$cfg")" CG_BENCH_ARGS="$args" bench/callgrind.sh | tail -n 2
  done
done
fi

echo
echo "## Requests per second (native, Modern, 8 in flight, ${SECONDS_EACH} s each)"
echo
echo "| result | guardrails | req/s | p50 µs | p99 µs |"
echo "|---:|---|---:|---:|---:|"
OUT=$(mktemp -d)
trap 'kill "${GW:-}" 2>/dev/null || true; rm -rf "$OUT"' EXIT
for size in 4096 1048576; do
  for cfg in off nomatch secrets; do
    # shellcheck disable=SC2046 # the option list is meant to split
    "$CG_BIN" run --host 127.0.0.1 --port 0 $(gw_args "$cfg") >"$OUT/gw.out" 2>"$OUT/gw.err" &
    GW=$!
    url=""
    for _ in $(seq 300); do
      url=$(sed -n 's/^switchboard: listening on //p' "$OUT/gw.out")
      [ -n "$url" ] && break
      sleep 0.1
    done
    [ -n "$url" ] || { echo "gateway did not start" >&2; cat "$OUT/gw.err" >&2; exit 1; }
    "$CG_BIN" bench --url "$url" --era modern --concurrency 8 --warmup 1 \
      --duration "$SECONDS_EACH" --json --tool leak \
      --args "{\"kind\":\"filler\",\"bytes\":$size}" >"$OUT/bench.json" 2>"$OUT/bench.err"
    jq -r --arg s "$size" --arg c "$cfg" \
      '"| \($s) | \($c) | \(.requests_per_sec | floor) | \(.p50_us) | \(.p99_us) |"' \
      "$OUT/bench.json"
    kill -TERM "$GW"
    wait "$GW" || true
    GW=""
  done
done
