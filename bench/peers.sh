#!/usr/bin/env bash
# Switchboard against other MCP gateways: the same stdio fixture behind each, the same driver,
# one run, one markdown table.
#
#   bench/peers.sh                  # install the peers once (cached in .tools/peers), then drive
#   BENCH_SECS=10 bench/peers.sh    # longer cells (default 5 s each, after 1 s warm-up)
#   PEERS_ONLY="switchboard supergateway" bench/peers.sh   # a subset (names: see TARGETS)
#
# Every target serves Streamable HTTP on 127.0.0.1 in front of `target/release/switchboard
# fixture` (the same binary, the same tools). `switchboard bench` drives each with
# $BENCH_CONC concurrent Legacy sessions (default 64), one request in flight per session,
# verifying every answer (its id and its unique echo text); a peer that prefixes tool names
# is driven with its name and still verified as echo (`--echo`). CPU is user+system time from
# /proc: the target's whole process tree (gateway, launchers, every fixture it spawned) and
# the driver's own, bracketing only the measured phase. Needs: node/npm, python3 (venv), cargo,
# jq, curl. The install step reaches npm, PyPI and crates.io once; the runs are loopback only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PEERS=${PEERS_DIR:-$ROOT/.tools/peers}
SECS=${BENCH_SECS:-5}
WARMUP=${BENCH_WARMUP:-1}
CONC=${BENCH_CONC:-64}
OUT=${BENCH_OUT:-$ROOT/target/bench/peers}
TARGETS="direct http-floor switchboard switchboard-1w switchboard-modern supergateway py-mcp-proxy fastmcp contextforge rust-mcp-proxy"
ONLY=${PEERS_ONLY:-$TARGETS}
mkdir -p "$OUT" "$PEERS"
for tool in jq curl node npm python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench/peers.sh needs $tool" >&2; exit 1; }
done

# shellcheck source=bench/peers_install.sh
source "$ROOT/bench/peers_install.sh"
install_peers

echo "building release…" >&2
cargo build --release -q -p switchboard
SB=$ROOT/target/release/switchboard
FIXTURE=("$SB" fixture)

PEER_PID=""
# Each target runs in its own session (setsid), so stopping it stops its whole tree.
stop_peer() {
  [ -n "$PEER_PID" ] || return 0
  kill -TERM -- "-$PEER_PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$PEER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$PEER_PID" 2>/dev/null || true
  wait "$PEER_PID" 2>/dev/null || true
  PEER_PID=""
}
trap stop_peer EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_peer NAME CMD…: runs CMD (with its own process group) and waits until URL answers
# HTTP at all (any status: readiness, not correctness, which the probe request checks).
start_peer() {
  local name=$1; shift
  setsid "$@" >"$OUT/$name.out" 2>"$OUT/$name.log" </dev/null &
  PEER_PID=$!
  for _ in $(seq 300); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$URL" || true)
    [ "$code" != "000" ] && return 0
    kill -0 "$PEER_PID" 2>/dev/null || break
    sleep 0.2
  done
  return 1
}

# drive NAME [bench args…]: one measured run against $URL, the report in $OUT/NAME.json.
drive() {
  local name=$1; shift
  if "$SB" bench --url "$URL" --json --concurrency "$CONC" --sessions "$CONC" \
      --warmup "$WARMUP" --duration "$SECS" --target-pid "$PEER_PID" "$@" \
      >"$OUT/$name.json" 2>"$OUT/$name.err"; then
    cat "$OUT/$name.json"
  else
    jq -cn --arg e "$(grep -v '^bench ' "$OUT/$name.err" | tail -1)" '{failed: $e}' | tee "$OUT/$name.json"
  fi
}

ROWS=""
SB_RATE=""
# row NAME LABEL REPORT [NOTE]: one table line.
row() {
  local name=$1 label=$2 report=$3 note=${4:-}
  ROWS+=$(jq -rn --argjson r "$report" --arg lab "$label" --arg note "$note" --arg sb "${SB_RATE:-0}" '
    def r1: . * 10 | round / 10;
    def vs: if ($sb|tonumber) > 0 and $r.requests_per_sec > 0
      then "\(($sb|tonumber) / $r.requests_per_sec | . * 10 | round / 10)×" else "–" end;
    if $r.failed then "| \($lab) | – | – | – | – | – | – | – | – | – | **could not be driven**: \($r.failed | gsub("\\|"; "/")) \($note) |"
    else
      ($r.target_tree_cpu_us_per_req // $r.server_cpu_us_per_req) as $tree |
      "| \($lab) | \($r.requests_per_sec) | \(vs) | \($r.p50_us) | \($r.p99_us) | \($tree // "–")\(if $r.target_tree_processes then " (\($r.target_tree_processes) proc.)" else "" end) | \($r.client_cpu_us_per_req // "–") | \(if $tree and $r.client_cpu_us_per_req then "\($tree / $r.client_cpu_us_per_req | . * 100 | round / 100)×" else "–" end) | \($r.errors) | \($r.wrong_answers) | \($note) |"
    end')$'\n'
}

# skip NAME LABEL WHY: a target that could not be run at all.
skip() { ROWS+="| $2 | – | – | – | – | – | – | – | – | – | **not run**: $3 |"$'\n'; }

# installed NAME LABEL: true if the peer installed; otherwise adds a row saying why not.
installed() {
  [ -e "$PEERS/$1.ok" ] && return 0
  skip "$1" "$2" "not installed: $(head -c 300 "$PEERS/$1.failed" 2>/dev/null | tr '|\n' '/ ')"
  return 1
}

wanted() { [[ " $ONLY " == *" $1 "* ]]; }

# run_target NAME LABEL NOTE BENCH_ARGS… -- CMD…: start CMD on a fresh port, drive it, stop it.
# CMD and BENCH_ARGS may use @PORT@, replaced by the port ($FIXED_PORT if set: a peer that
# takes its port from a config file).
run_target() {
  local name=$1 label=$2 note=$3; shift 3
  local port=${FIXED_PORT:-}
  [ -n "$port" ] || port=$(free_port)
  local args=() cmd=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  for a in "$@"; do cmd+=("${a//@PORT@/$port}"); done
  URL=${URL_TEMPLATE//@PORT@/$port}
  echo "driving $label at $URL…" >&2
  if ! start_peer "$name" "${cmd[@]}"; then
    skip "$name" "$label" "did not start: $(tail -1 "$OUT/$name.log" | tr '|' '/')"
    stop_peer
    return 0
  fi
  local r; r=$(drive "$name" "${args[@]}")
  stop_peer
  row "$name" "$label" "$r" "$note"
  REPORT=$r
}

LOAD0=$(cut -d' ' -f1 /proc/loadavg)

if wanted direct; then
  echo "driving the fixture directly over stdio…" >&2
  d=$("$SB" bench --json --stdio --concurrency "$CONC" --warmup "$WARMUP" --duration "$SECS" \
      -- "${FIXTURE[@]}" 2>"$OUT/direct.err" || jq -cn '{failed: "direct run failed"}')
  echo "$d" >"$OUT/direct.json"
  row direct "fixture over stdio, no gateway (the floor)" "$d" "one pipe, no HTTP; CPU column is the fixture's"
fi

URL_TEMPLATE="http://127.0.0.1:@PORT@/mcp"
# The same fixture answering over HTTP itself (its own axum server, no backend hop): what one
# loopback HTTP exchange costs with nothing behind it, the floor for any HTTP gateway. On as
# many worker threads as the gateway gets by default (one per core), so the floor scales
# with cores like the gateway can.
FLOOR_THREADS=$(nproc)
wanted http-floor && run_target http-floor "fixture over HTTP, no gateway (the HTTP floor, \`--threads $FLOOR_THREADS\`)" \
  "the fixture's own axum server answers; no backend hop" -- \
  "$SB" fixture --http --threads "$FLOOR_THREADS" --host 127.0.0.1 --port @PORT@
if wanted switchboard; then
  run_target switchboard "**Switchboard** \`run\`" "default worker threads" -- \
    "$SB" run --host 127.0.0.1 --port @PORT@
  SB_RATE=$(jq -r '.requests_per_sec // 0' <<<"$REPORT")
fi
wanted switchboard-1w && run_target switchboard-1w "**Switchboard** \`run --worker-threads 1\`" "" -- \
  "$SB" run --host 127.0.0.1 --port @PORT@ --worker-threads 1
wanted switchboard-modern && run_target switchboard-modern "**Switchboard**, Modern stateless" \
  "2026-07-28 requests, no sessions" --era modern -- "$SB" run --host 127.0.0.1 --port @PORT@

if wanted supergateway && installed supergateway "supergateway 4"; then
  # Stateless supergateway spawns a fixture per POST; stateful keeps one per session.
  run_target supergateway "supergateway $(jq -r .version "$PEERS/npm/node_modules/supergateway/package.json") \`--stateful\`" \
    "one fixture per session ($CONC)" -- \
    node "$PEERS/npm/node_modules/supergateway/dist/index.js" --stdio "${FIXTURE[*]}" \
    --outputTransport streamableHttp --stateful --port @PORT@ --logLevel none
fi

if wanted py-mcp-proxy && installed py-mcp-proxy "mcp-proxy 0.13.0 (Python)"; then
  run_target py-mcp-proxy "mcp-proxy 0.13.0 (Python)" "one shared fixture" -- \
    "$PEERS/py-mcp-proxy/bin/mcp-proxy" --host 127.0.0.1 --port @PORT@ --log-level WARNING \
    -- "${FIXTURE[@]}"
fi

if wanted fastmcp && installed fastmcp "FastMCP proxy"; then
  v=$("$PEERS/fastmcp/bin/python" -c 'import importlib.metadata as m; print(m.version("fastmcp"))')
  run_target fastmcp "FastMCP $v proxy (\`bench/fastmcp_proxy.py\`)" "" -- \
    "$PEERS/fastmcp/bin/python" "$ROOT/bench/fastmcp_proxy.py" @PORT@ "${FIXTURE[@]}"
fi

if wanted contextforge && installed contextforge "ContextForge gateway"; then
  contextforge_run
fi

if wanted rust-mcp-proxy && installed rust-mcp-proxy "mcp-proxy 0.6.0 (Rust)"; then
  rust_mcp_proxy_run
fi

# At concurrency 1 the latency added per request shows, not queueing: the stdio floor, the
# HTTP floor and Switchboard once more, one request in flight.
ROWS_MAIN=$ROWS
ROWS=""
if [ -z "${PEERS_NO_C1:-}" ]; then
  CONC_MAIN=$CONC
  CONC=1
  SB_RATE=""
  if wanted direct; then
    d=$("$SB" bench --json --stdio --concurrency 1 --warmup "$WARMUP" --duration "$SECS" \
        -- "${FIXTURE[@]}" 2>"$OUT/direct-c1.err" || jq -cn '{failed: "direct run failed"}')
    row direct-c1 "fixture over stdio, no gateway" "$d"
  fi
  wanted http-floor && run_target http-floor-c1 "fixture over HTTP, no gateway (\`--threads $FLOOR_THREADS\`)" "" -- \
    "$SB" fixture --http --threads "$FLOOR_THREADS" --host 127.0.0.1 --port @PORT@
  wanted switchboard && run_target switchboard-c1 "**Switchboard** \`run\`" "" -- \
    "$SB" run --host 127.0.0.1 --port @PORT@
  CONC=$CONC_MAIN
fi
ROWS_C1=$ROWS

cat <<EOF | tee "$OUT/results.md"
## Peers — $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (+ uncommitted changes)'), $(nproc) cores

$CONC concurrent Legacy sessions (one request in flight each), tools/call echo, ${SECS} s after ${WARMUP} s warm-up, one run per target. Load average before: $LOAD0, after: $(cut -d' ' -f1 /proc/loadavg).

| target | req/s | Switchboard ÷ target | p50 µs | p99 µs | target tree CPU µs / req | driver CPU µs / req | tree ÷ driver | errors | wrong | notes |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
$ROWS_MAIN
$(if [ -n "$ROWS_C1" ]; then
  echo "Concurrency 1 (one session, one request in flight: the latency each hop adds):"
  echo
  echo "| target | req/s | Switchboard ÷ target | p50 µs | p99 µs | target tree CPU µs / req | driver CPU µs / req | tree ÷ driver | errors | wrong | notes |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
  printf '%s' "$ROWS_C1"
fi)
EOF
