#!/usr/bin/env bash
# Reproduces the numbers in BENCHMARKS.md with one command:
#
#   bench/run.sh                 # ~3 minutes on a 2-core machine
#   BENCH_SECS=5 bench/run.sh    # longer cells, steadier numbers
#
# Release build, 127.0.0.1 only, every cell bounded in time. The markdown table goes to stdout
# (and target/bench/results.md); raw `switchboard bench --json` reports land in target/bench/.
# Needs: bash, jq, Linux /proc (for RSS and CPU accounting).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SECS=${BENCH_SECS:-3}           # measured seconds per cell
WARMUP=${BENCH_WARMUP:-1}       # unmeasured seconds before each cell
SCALE=${BENCH_SESSIONS:-10000}  # sessions for the scale cell
OUT=${BENCH_OUT:-$ROOT/target/bench}
mkdir -p "$OUT"
command -v jq >/dev/null || { echo "bench/run.sh needs jq" >&2; exit 1; }

echo "building release…" >&2
cargo build --release -q -p switchboard
SB=$ROOT/target/release/switchboard

GW_PID=""
cleanup() { [ -n "$GW_PID" ] && kill "$GW_PID" 2>/dev/null || true; }
trap cleanup EXIT

# gw_start [run args…]: starts a gateway on a free loopback port in front of the built-in
# fixture; sets GW_PID and URL.
gw_start() { gw_launch run "$@"; }

# gw_launch SUBCOMMAND [args…]: the same for any subcommand that serves (`run`, `serve`).
gw_launch() {
  local sub=$1; shift
  "$SB" "$sub" --host 127.0.0.1 --port 0 "$@" >"$OUT/gateway.out" 2>"$OUT/gateway.err" &
  GW_PID=$!
  URL=""
  for _ in $(seq 300); do
    URL=$(sed -n 's/^switchboard: listening on //p' "$OUT/gateway.out")
    [ -n "$URL" ] && return 0
    kill -0 "$GW_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "gateway did not start:" >&2; cat "$OUT/gateway.err" >&2; exit 1
}

gw_stop() {
  kill "$GW_PID" 2>/dev/null || true
  wait "$GW_PID" 2>/dev/null || true
  GW_PID=""
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# utime+stime of one process, in clock ticks (USER_HZ, 100/s on Linux).
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

# [BW=secs] bench NAME [bench args…]: runs `switchboard bench --json`, keeps the report in $OUT/NAME.json
# and prints it; on failure prints {"failed": "<last stderr line>"}.
bench() {
  local name=$1; shift
  if "$SB" bench --json --warmup "${BW:-$WARMUP}" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"; then
    cat "$OUT/$name.json"
  else
    jq -cn --arg e "$(grep -v '^bench ' "$OUT/$name.err" | tail -1)" '{failed: $e}' | tee "$OUT/$name.json"
  fi
}

j() { jq -r "$1" <<<"$2"; }
clean() { j 'if .failed then "FAILED" else "\(.errors) / \(.wrong_answers)" end' "$1"; }

{
echo "## Switchboard benchmarks — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, ${SECS}s cells"
echo
echo "Commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
echo
# The driver, the gateway and the fixture share this machine's cores with everything else on
# it: a busy machine makes every number worse, and not equally (the gateway path needs more
# CPU per request, so it loses more). Say how busy it was.
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
echo "Load average before the run: $LOAD0$(awk -v l="$LOAD0" 'BEGIN { if (l > 0.5) print " — **the machine was busy; treat these numbers as pessimistic**" }')"
echo

# 1. Overhead: the same fixture, directly over stdio vs through the gateway (shared mode).
# overhead_rows "gateway args…": one table row per concurrency (direct runs are measured once
# and reused), CPU rows collected in CPU_ROWS.
overhead_rows() {
  gw_start "$@"
  FIXTURE_PID=$(pgrep -P "$GW_PID" | head -1)
  CPU_ROWS=""
  for c in $CONCS; do
    [ -s "$OUT/direct-c$c.json" ] && [ "${REUSE_DIRECT:-}" = 1 ] && d=$(cat "$OUT/direct-c$c.json") ||
      d=$(bench "direct-c$c" --stdio --concurrency "$c" --duration "$SECS" -- "$SB" fixture)
    # Warm up in a separate run so the CPU counters bracket only measured requests (plus c
    # initialize handshakes, negligible).
    BW=0 bench "gateway-c$c-warm" --url "$URL" --concurrency "$c" --duration "$WARMUP" >/dev/null
    g0=$(cpu_ticks "$GW_PID"); f0=$(cpu_ticks "$FIXTURE_PID")
    g=$(BW=0 bench "gateway-c$c" --url "$URL" --concurrency "$c" --sessions "$c" --duration "$SECS")
    g1=$(cpu_ticks "$GW_PID"); f1=$(cpu_ticks "$FIXTURE_PID")
    jq -rn --argjson d "$d" --argjson g "$g" --arg c "$c" --arg clean "$(clean "$d") · $(clean "$g")" '
      def r1: . * 10 | round / 10;
      if ($d.failed or $g.failed) then "| \($c) | \($d.requests_per_sec // "FAILED") | \($g.requests_per_sec // "FAILED") | – | – | – | \($clean) |"
      else "| \($c) | \($d.requests_per_sec) | \($g.requests_per_sec) | **\($g.requests_per_sec / $d.requests_per_sec * 100 | round / 100)×** | \($d.p50_us) → \($g.p50_us) (**+\($g.p50_us - $d.p50_us | r1)**) | \($d.p99_us) → \($g.p99_us) (**+\($g.p99_us - $d.p99_us | r1)**) | \($clean) |" end'
    CPU_ROWS+=$(jq -rn --argjson d "$d" --argjson g "$g" --arg c "$c" \
      --arg gt "$((g1 - g0))" --arg ft "$((f1 - f0))" '
      def r1: . * 10 | round / 10;
      def per($t): ($t | tonumber) * 10000 / $g.requests | r1;
      if ($d.failed or $g.failed) then "| \($c) | – | – | – | – | – |"
      else "| \($c) | \($d.client_cpu_us_per_req) + \($d.server_cpu_us_per_req) = \($d.client_cpu_us_per_req + $d.server_cpu_us_per_req | r1) | \($g.client_cpu_us_per_req) | **\(per($gt))** | \(per($ft)) | \($g.client_cpu_us_per_req + per($gt) + per($ft) | r1) |" end')$'\n'
  done
  gw_stop
  echo
  echo "CPU per request (µs, user+sys from /proc; the driver shares the machine's cores with the"
  echo "target, so on a small machine throughput is roughly cores ÷ total CPU per request):"
  echo
  echo "| conc. | direct: driver + fixture | gw run: driver | gateway | fixture behind gw | gw run total |"
  echo "|---:|---|---:|---:|---:|---:|"
  printf '%s' "$CPU_ROWS"
  echo
}

OVERHEAD_HEAD="| conc. | direct req/s | gateway req/s | ratio | p50 direct → gw (added) µs | p99 direct → gw (added) µs | errors / wrong |
|---:|---:|---:|---:|---|---|---|"
echo "### 1. Overhead (Legacy, echo; gateway sessions = concurrency; default worker threads)"
echo
echo "$OVERHEAD_HEAD"
CONCS="1 16 64" overhead_rows
echo "### 1b. The same with \`run --worker-threads 1\` (direct runs reused from 1)"
echo
echo "$OVERHEAD_HEAD"
CONCS="1 64" REUSE_DIRECT=1 overhead_rows --worker-threads 1

# 2. Session scale: many concurrent Legacy sessions on one shared backend.
echo "### 2. Session scale ($SCALE Legacy sessions, 64 concurrent requests spread over all of them)"
echo
gw_start
# Warm the gateway (threads, pools, allocator arenas) before the baseline, then drop those sessions.
bench "scale-warm" --url "$URL" --concurrency 64 --sessions 64 --duration 1 >/dev/null
sleep 0.5
rss0=$(rss_kib "$GW_PID")
s=$(bench "scale" --url "$URL" --concurrency 64 --sessions "$SCALE" --duration "$SECS" --keep-sessions)
sleep 0.5
rss1=$(rss_kib "$GW_PID")
echo "| sessions held | gateway RSS before → after | per session | req/s | p50 / p99 µs | errors / wrong |"
echo "|---:|---|---:|---:|---|---|"
jq -rn --argjson s "$s" --arg r0 "$rss0" --arg r1 "$rss1" --arg n "$SCALE" --arg clean "$(clean "$s")" '
  ($r0|tonumber) as $a | ($r1|tonumber) as $b |
  if $s.failed then "| FAILED: \($s.failed) | \($a) → \($b) KiB | – | – | – | \($clean) |"
  else "| \($s.sessions) | \($a) → \($b) KiB | **\((($b - $a) * 1024 / ($n|tonumber)) | round) B** | \($s.requests_per_sec) | \($s.p50_us) / \($s.p99_us) | \($clean) |" end'
gw_stop
echo

# 3. Modern stateless throughput.
echo "### 3. Modern (2026-07-28) stateless, concurrency 64"
echo
gw_start
md=$(bench "modern-direct" --stdio --era modern --concurrency 64 --duration "$SECS" -- "$SB" fixture)
mg=$(bench "modern-gateway" --url "$URL" --era modern --concurrency 64 --duration "$SECS")
gw_stop
if j '.failed // empty' "$mg" | grep -q .; then
  echo "**The gateway does not serve Modern requests yet** (probe: \`$(j .failed "$mg")\`)."
  echo "Direct over stdio for reference: $(j .requests_per_sec "$md") req/s, p50 $(j .p50_us "$md") µs, p99 $(j .p99_us "$md") µs."
else
  echo "| direct req/s | gateway req/s | ratio | p50 direct → gw µs | p99 direct → gw µs | errors / wrong |"
  echo "|---:|---:|---:|---|---|---|"
  jq -rn --argjson d "$md" --argjson g "$mg" --arg clean "$(clean "$md") · $(clean "$mg")" '
    "| \($d.requests_per_sec) | \($g.requests_per_sec) | **\($g.requests_per_sec / $d.requests_per_sec * 100 | round / 100)×** | \($d.p50_us) → \($g.p50_us) | \($d.p99_us) → \($g.p99_us) | \($clean) |"'
fi
echo

# 4. Listen-stream fan-out: needs GET /mcp listen streams.
FANOUT=${BENCH_FANOUT:-1000}
echo "### 4. Listen-stream fan-out (tools/list_changed to $FANOUT GET streams)"
echo
gw_start
sid=$(curl -s -D - -o /dev/null -X POST "$URL" -H 'Accept: application/json, text/event-stream' \
  -H 'Content-Type: application/json' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"0"}}}' \
  | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:" {print $2}')
get=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$URL" -H 'Accept: text/event-stream' \
  -H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-11-25' || true)
if [ "$get" = "200" ]; then
  echo "| streams | opened in | trigger call µs | delivered | delivery p50 / p90 / p99 / max µs | errors |"
  echo "|---:|---:|---:|---:|---|---|"
  for round in 1 2 3; do
    f=$("$SB" bench --url "$URL" --fanout "$FANOUT" --json 2>"$OUT/fanout-$round.err" \
      || jq -cn --arg e "$(tail -1 "$OUT/fanout-$round.err")" '{failed: $e}')
    echo "$f" >"$OUT/fanout-$round.json"
    jq -r 'if .failed then "| FAILED: \(.failed) | | | | | |"
      else "| \(.fanout) | \(.open_secs) s | \(.trigger_us) | \(.delivered) | \(.p50_us) / \(.p90_us) / \(.p99_us) / **\(.max_us)** | \(.errors) \(.errors_by_kind) |" end' <<<"$f"
  done
else
  echo "Not available yet: GET /mcp answers ${get:-nothing} (no listen streams)."
fi
gw_stop
echo

# 5. Per-session backends.
echo "### 5. Per-session mode (session setup cost, processes reaped)"
echo
PS_N=${BENCH_PS_SESSIONS:-50}
gw_start --isolation per-session
H=(-H 'Accept: application/json, text/event-stream' -H 'Content-Type: application/json')
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}'
CALL='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}'
sids=()
start=$(date +%s%N)
for _ in $(seq "$PS_N"); do
  sid=$(curl -s -D - -o /dev/null -X POST "$URL" "${H[@]}" -d "$INIT" | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:" {print $2}')
  curl -s -o /dev/null -X POST "$URL" "${H[@]}" -H "Mcp-Session-Id: $sid" -d "$CALL"
  sids+=("$sid")
done
setup_us=$(( ($(date +%s%N) - start) / 1000 / PS_N ))
children=$(ps --ppid "$GW_PID" --no-headers | wc -l)
for sid in "${sids[@]}"; do curl -s -o /dev/null -X DELETE "$URL" -H "Mcp-Session-Id: $sid"; done
left=$(ps --ppid "$GW_PID" --no-headers | wc -l)
echo "| sessions | initialize → first result (mean, sequential) | backend processes while open | after DELETE |"
echo "|---:|---:|---:|---:|"
echo "| $PS_N | $setup_us µs | $children | $left (the shared backend for Modern/sessionless requests) |"
gw_stop
echo

# 6. The virtual server: three backends behind `serve` (two stdio fixtures and a remote
# fixture) against the one-backend proxy, in the same run.
echo "### 6. Virtual server (\`serve\`, 3 backends: 2 stdio fixtures + 1 remote fixture)"
echo
"$SB" fixture --http --host 127.0.0.1 --port 0 >"$OUT/remote.out" 2>"$OUT/remote.err" &
FX_PID=$!
FXURL=""
for _ in $(seq 300); do
  FXURL=$(sed -n 's/^switchboard fixture: listening on //p' "$OUT/remote.out")
  [ -n "$FXURL" ] && break
  sleep 0.1
done
cat >"$OUT/vmcp.yaml" <<YAML
backends:
  - {name: alpha, command: "$SB", args: [fixture]}
  - {name: beta, command: "$SB", args: [fixture]}
  - {name: gamma, url: "$FXURL"}
YAML
gw_launch serve --config "$OUT/vmcp.yaml"
VURL=$URL
v=$(bench "vmcp-c16" --url "$VURL" --concurrency 16 --sessions 16 --duration "$SECS" --tool alpha_echo --args '{"text":"x"}')
vr=$(bench "vmcp-remote-c16" --url "$VURL" --concurrency 16 --sessions 16 --duration "$SECS" --tool gamma_echo --args '{"text":"x"}')
# Merged tools/list: served from the per-backend lists (fetched again after the 5 s TTL).
list_ms() {
  python3 - "$1" "$2" <<'PY'
import http.client, json, sys, time, urllib.parse
url, n = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection(url.hostname, url.port)
h = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
def post(body, extra={}):
    c.request("POST", url.path, json.dumps(body), {**h, **extra}); r = c.getresponse(); r.read(); return r
r = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}})
sid = {"mcp-session-id": r.getheader("mcp-session-id"), "mcp-protocol-version": "2025-11-25"}
t = []
for i in range(n):
    t0 = time.perf_counter(); post({"jsonrpc": "2.0", "id": i + 1, "method": "tools/list"}, sid); t.append(time.perf_counter() - t0)
t.sort()
print("%.0f %.0f" % (t[len(t) // 2] * 1e6, t[int(len(t) * 0.99)] * 1e6))
PY
}
vl=$(list_ms "$VURL" 300)
gw_stop
gw_start
p=$(bench "proxy-c16" --url "$URL" --concurrency 16 --sessions 16 --duration "$SECS")
pl=$(list_ms "$URL" 300)
gw_stop
gw_start --url "$FXURL"
rl=$(list_ms "$URL" 300)
gw_stop
kill "$FX_PID" 2>/dev/null || true
echo "| tools/call, c=16 | req/s | p50 / p99 µs | vs the one-backend proxy | errors / wrong |"
echo "|---|---:|---|---:|---|"
jq -rn --argjson p "$p" --arg clean "$(clean "$p")" '"| `run` (one stdio fixture, `echo`) | \($p.requests_per_sec) | \($p.p50_us) / \($p.p99_us) | 1× | \($clean) |"'
jq -rn --argjson v "$v" --argjson p "$p" --arg clean "$(clean "$v")" '"| `serve`, stdio backend (`alpha_echo`) | \($v.requests_per_sec) | \($v.p50_us) / \($v.p99_us) | **\($v.requests_per_sec / $p.requests_per_sec * 100 | round / 100)×** | \($clean) |"'
jq -rn --argjson v "$vr" --argjson p "$p" --arg clean "$(clean "$vr")" '"| `serve`, remote backend (`gamma_echo`) | \($v.requests_per_sec) | \($v.p50_us) / \($v.p99_us) | \($v.requests_per_sec / $p.requests_per_sec * 100 | round / 100)× | \($clean) |"'
echo
echo "| tools/list, sequential, one session | p50 / p99 µs |"
echo "|---|---|"
echo "| \`serve\`, merged (3 backends, ~110 tools) | $(echo "$vl" | awk '{print $1 " / " $2}') |"
echo "| \`run\`, one stdio fixture (pass-through) | $(echo "$pl" | awk '{print $1 " / " $2}') |"
echo "| \`run --url\`, the remote fixture alone (the slowest backend) | $(echo "$rl" | awk '{print $1 " / " $2}') |"
echo
echo "Load average after the run: $(cut -d' ' -f1 /proc/loadavg) (the suite itself adds ~1–2)."
} | tee "$OUT/results.md"
