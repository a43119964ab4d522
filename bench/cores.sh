#!/usr/bin/env bash
# How Switchboard scales with cores (issue 37's table), in one command over the release binary:
#
#   bench/cores.sh                       # builds target/release/switchboard if missing, then runs
#   SB=/path/to/switchboard bench/cores.sh   # an already-built binary (nothing is built)
#   BENCH_SECS=4 bench/cores.sh          # cell length (default: 4 s full sweep, 1 s reduced)
#
# With 8 or more cores the target (gateway, fixture, every process it starts) and the driver
# (`switchboard bench`) run on disjoint core sets (`taskset`): the driver gets the upper half
# of the machine, the target 1, 2, 4 and 8 cores of the lower half (those that fit), and each
# target is told its core count (`--worker-threads`, `fixture --threads`). Concurrency sweeps
# 64, 256 and 1024 Legacy sessions (sessions = concurrency, one request in flight each, echo,
# every answer verified). Rows: the fixture driven directly over stdio (one pipe, no HTTP);
# `fixture --http --threads N` (the multi-core HTTP floor: one HTTP exchange, no backend hop);
# `run`; Modern (stateless) through `run`; `serve` with three stdio backends; `replicas: 1 / 2
# / 4` of the fixture behind `serve`; latency at concurrency 1; 1,000,000 idle Legacy sessions
# held (req/s across them, RSS per session); a `tools/list_changed` fan-out to 10,000 listen
# streams.
#
# With fewer than 8 cores nothing can be pinned apart usefully: a REDUCED sweep runs (and says
# so): the target on core 0 and the driver on the rest when there are 2 or more ("1 core"), then
# both unpinned on every core ("all, shared"), concurrency 64 and 256, 1 s cells, 10,000 idle
# sessions and a 1,000-stream fan-out. Its numbers show costs, not scaling.
#
# Loopback only; nothing is fetched at run time. Needs: bash, jq, taskset (util-linux), Linux
# /proc. Raw reports: target/bench/cores/*.json; the table: stdout and target/bench/cores/results.md.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${BENCH_OUT:-$ROOT/target/bench/cores}
mkdir -p "$OUT"
for tool in jq taskset; do
  command -v "$tool" >/dev/null || { echo "bench/cores.sh needs $tool" >&2; exit 1; }
done
if [ -z "${SB:-}" ]; then
  SB=$ROOT/target/release/switchboard
  [ -x "$SB" ] || { echo "building release…" >&2; cargo build --release -q -p switchboard; }
fi

NPROC=$(nproc)
if [ "$NPROC" -ge 8 ]; then
  MODE=full
  SECS=${BENCH_SECS:-4}
  WARMUP=${BENCH_WARMUP:-1}
  HALF=$((NPROC / 2))
  DRIVER_CPUS="$HALF-$((NPROC - 1))"
  CORES=""
  for n in 1 2 4 8; do [ "$n" -le "$HALF" ] && CORES+="$n "; done
  CONCS=${BENCH_CONCS:-"64 256 1024"}
  IDLE=${BENCH_IDLE_SESSIONS:-1000000}
  FANOUT=${BENCH_FANOUT:-10000}
else
  MODE=reduced
  SECS=${BENCH_SECS:-1}
  WARMUP=${BENCH_WARMUP:-0.5}
  if [ "$NPROC" -ge 2 ]; then
    CORES="1 all"
    DRIVER_CPUS="1-$((NPROC - 1))"
    [ "$NPROC" -eq 2 ] && DRIVER_CPUS=1
  else
    CORES="all"
    DRIVER_CPUS=""
  fi
  CONCS=${BENCH_CONCS:-"64 256"}
  IDLE=${BENCH_IDLE_SESSIONS:-10000}
  FANOUT=${BENCH_FANOUT:-1000}
fi
# The core count the one-off rows (Modern, serve, replicas, c=1, sessions, fan-out) use: the
# largest of the sweep.
TOP=$(echo "$CORES" | awk '{print $NF}')

# cpus_for N: the target's CPU list for N cores ("all": every CPU, shared with the driver).
cpus_for() { if [ "$1" = all ]; then echo "0-$((NPROC - 1))"; else echo "0-$(($1 - 1))"; fi; }
threads_for() { if [ "$1" = all ]; then echo "$NPROC"; else echo "$1"; fi; }
# on_driver CMD…: the driver on its own cores (everything, when the target is unpinned).
on_driver() {
  if [ "$CUR_CORES" = all ] || [ -z "$DRIVER_CPUS" ]; then "$@"; else taskset -c "$DRIVER_CPUS" "$@"; fi
}

T_PID=""
stop_target() {
  [ -n "$T_PID" ] || return 0
  kill -TERM "$T_PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$T_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$T_PID" 2>/dev/null || true
  wait "$T_PID" 2>/dev/null || true
  T_PID=""
}
trap stop_target EXIT

# start_target NAME PREFIX CMD…: starts CMD pinned to the current cores on port 0 and waits
# for the line starting with PREFIX that names its URL; sets T_PID and URL.
start_target() {
  local name=$1 prefix=$2; shift 2
  taskset -c "$(cpus_for "$CUR_CORES")" "$@" >"$OUT/$name.out" 2>"$OUT/$name.log" </dev/null &
  T_PID=$!
  URL=""
  for _ in $(seq 600); do
    URL=$(sed -n "s|^$prefix||p" "$OUT/$name.out" 2>/dev/null | head -1)
    [ -n "$URL" ] && return 0
    kill -0 "$T_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "$name did not start:" >&2
  tail -5 "$OUT/$name.log" >&2
  return 1
}
gw() { start_target "$1" "switchboard: listening on " "${@:2}"; }
floor() { start_target "$1" "switchboard fixture: listening on " "${@:2}"; }

# drive NAME BENCH_ARGS…: one measured run against $URL (the target tree's CPU counted).
drive() {
  local name=$1; shift
  if on_driver "$SB" bench --url "$URL" --json --warmup "$WARMUP" --target-pid "$T_PID" "$@" \
      >"$OUT/$name.json" 2>"$OUT/$name.err"; then
    cat "$OUT/$name.json"
  else
    jq -cn --arg e "$(grep -v '^bench ' "$OUT/$name.err" | tail -1)" '{failed: $e}' | tee "$OUT/$name.json"
  fi
}

ROWS=""
# row LABEL CORES CONC REPORT [NOTE]
row() {
  ROWS+=$(jq -rn --argjson r "$4" --arg lab "$1" --arg cores "$2" --arg c "$3" --arg note "${5:-}" '
    if $r.failed then "| \($lab) | \($cores) | \($c) | – | – | – | – | **failed**: \($r.failed | gsub("\\|"; "/")) |"
    else
      ($r.target_tree_cpu_us_per_req // $r.server_cpu_us_per_req // "–") as $cpu |
      "| \($lab) | \($cores) | \($c) | \($r.requests_per_sec | round) | \($cpu) | \($r.p50_us) / \($r.p99_us) | \($r.errors) / \($r.wrong_answers) | \($note) |"
    end')$'\n'
}
missing() { ROWS+="| $1 | – | – | – | – | – | – | **not run**: $2 |"$'\n'; }

load() { "$@" --concurrency "$CUR_CONC" --sessions "$CUR_CONC" --duration "$SECS"; }

LOAD0=$(cut -d' ' -f1 /proc/loadavg)

# 1. The sweep: stdio direct, the HTTP floor and `run`, per core count and concurrency.
for CUR_CORES in $CORES; do
  n=$(threads_for "$CUR_CORES")
  for CUR_CONC in $CONCS; do
    echo "cores $CUR_CORES, c=$CUR_CONC…" >&2
    # The fixture itself over one pipe: the driver starts it, pinned like a target.
    d=$(on_driver "$SB" bench --json --stdio --concurrency "$CUR_CONC" --warmup "$WARMUP" \
        --duration "$SECS" -- taskset -c "$(cpus_for "$CUR_CORES")" "$SB" fixture \
        2>"$OUT/direct-$CUR_CORES-$CUR_CONC.err" || jq -cn '{failed: "direct run failed"}')
    echo "$d" >"$OUT/direct-$CUR_CORES-$CUR_CONC.json"
    row "fixture direct over stdio" "$CUR_CORES" "$CUR_CONC" "$d" "one pipe; CPU: the fixture's"
    if floor "floor-$CUR_CORES-$CUR_CONC" "$SB" fixture --http --host 127.0.0.1 --port 0 --threads "$n"; then
      row "\`fixture --http --threads $n\` (HTTP floor)" "$CUR_CORES" "$CUR_CONC" \
        "$(load drive "floor-$CUR_CORES-$CUR_CONC")"
    else missing "HTTP floor, $CUR_CORES cores" "did not start"; fi
    stop_target
    if gw "run-$CUR_CORES-$CUR_CONC" "$SB" run --host 127.0.0.1 --port 0 --worker-threads "$n"; then
      row "\`run\`" "$CUR_CORES" "$CUR_CONC" "$(load drive "run-$CUR_CORES-$CUR_CONC")"
    else missing "\`run\`, $CUR_CORES cores" "did not start"; fi
    stop_target
  done
done

# 2. One-off rows at the largest core count, c=256.
CUR_CORES=$TOP
CUR_CONC=256
n=$(threads_for "$TOP")
echo "Modern, serve, replicas at $TOP cores…" >&2
if gw modern "$SB" run --host 127.0.0.1 --port 0 --worker-threads "$n"; then
  row "Modern (stateless) through \`run\`" "$TOP" 256 "$(load drive modern --era modern)"
fi
stop_target

cat >"$OUT/three.yaml" <<YAML
backends:
  - {name: alpha, command: "$SB", args: [fixture]}
  - {name: beta, command: "$SB", args: [fixture]}
  - {name: gamma, command: "$SB", args: [fixture]}
YAML
if gw serve3 "$SB" serve --config "$OUT/three.yaml" --host 127.0.0.1 --port 0 --worker-threads "$n"; then
  row "\`serve\`, 3 backends" "$TOP" 256 "$(load drive serve3 --tool beta_echo --echo)" "calls to one of the three"
fi
stop_target

for r in 1 2 4; do
  cat >"$OUT/replicas-$r.yaml" <<YAML
backends:
  - {name: fixture, command: "$SB", args: [fixture], replicas: $r}
YAML
  if gw "replicas-$r" "$SB" serve --config "$OUT/replicas-$r.yaml" --host 127.0.0.1 --port 0 --worker-threads "$n"; then
    row "\`serve\`, \`replicas: $r\`" "$TOP" 256 "$(load drive "replicas-$r")" "least in flight across $r processes"
  fi
  stop_target
done

# 3. Concurrency 1: the latency each hop adds.
CUR_CONC=1
d=$(on_driver "$SB" bench --json --stdio --concurrency 1 --warmup "$WARMUP" --duration "$SECS" \
    -- taskset -c "$(cpus_for "$TOP")" "$SB" fixture 2>"$OUT/direct-c1.err" || jq -cn '{failed: "direct run failed"}')
row "fixture direct over stdio" "$TOP" 1 "$d"
if floor floor-c1 "$SB" fixture --http --host 127.0.0.1 --port 0 --threads "$n"; then
  row "\`fixture --http --threads $n\` (HTTP floor)" "$TOP" 1 "$(load drive floor-c1)"
fi
stop_target
if gw run-c1 "$SB" run --host 127.0.0.1 --port 0 --worker-threads "$n"; then
  row "\`run\`" "$TOP" 1 "$(load drive run-c1)"
fi
stop_target

# 4. Idle sessions: $IDLE Legacy sessions held, 1024 (reduced: 256) requests in flight across
# them; the gateway's RSS per session.
SCALE_ROW=""
CUR_CONC=256
[ "$MODE" = full ] && CUR_CONC=1024
if gw idle "$SB" run --host 127.0.0.1 --port 0 --worker-threads "$n" --max-sessions "$((IDLE + 1024))"; then
  on_driver "$SB" bench --url "$URL" --json --warmup 0 --concurrency 64 --sessions 64 --duration 0.5 >/dev/null 2>&1 || true
  rss0=$(awk '/^VmRSS:/ {print $2}' "/proc/$T_PID/status")
  s=$(drive idle --concurrency "$CUR_CONC" --sessions "$IDLE" --duration "$SECS" --keep-sessions --timeout 120)
  rss1=$(awk '/^VmRSS:/ {print $2}' "/proc/$T_PID/status")
  SCALE_ROW=$(jq -rn --argjson s "$s" --arg a "$rss0" --arg b "$rss1" --arg n "$IDLE" --arg cores "$TOP" '
    if $s.failed then "| \($n) | \($cores) | – | – | – | **failed**: \($s.failed) |"
    else "| \($n) | \($cores) | \($s.requests_per_sec | round) | \($a) → \($b) KiB | \((($b|tonumber) - ($a|tonumber)) / ($n|tonumber) | . * 100 | round / 100) KiB | \($s.errors) / \($s.wrong_answers) |" end')
fi
stop_target

# 5. Fan-out: one `tools/list_changed` to $FANOUT listen streams.
FAN_ROW=""
if gw fanout "$SB" run --host 127.0.0.1 --port 0 --worker-threads "$n" --max-sessions "$((FANOUT + 64))"; then
  f=$(on_driver "$SB" bench --url "$URL" --fanout "$FANOUT" --json 2>"$OUT/fanout.err" \
      || jq -cn --arg e "$(tail -1 "$OUT/fanout.err")" '{failed: $e}')
  echo "$f" >"$OUT/fanout.json"
  FAN_ROW=$(jq -rn --argjson f "$f" --arg cores "$TOP" '
    if $f.failed then "| \($cores) | – | – | **failed**: \($f.failed) |"
    else "| \($cores) | \($f.fanout) | \($f.delivered) | \($f.p50_us) / \($f.p99_us) / \($f.max_us) | \($f.errors) |" end')
fi
stop_target

{
echo "## Cores — $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
echo
if [ "$MODE" = full ]; then
  echo "$NPROC cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')): target on cores 0..N-1, driver on $DRIVER_CPUS (taskset); ${SECS} s cells after ${WARMUP} s warm-up."
else
  echo "**REDUCED sweep**: $NPROC cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), fewer than 8, so target and driver cannot get disjoint sets of several cores: \"1\" is the target on core 0 and the driver on ${DRIVER_CPUS:-the same core}; \"all\" is both unpinned, sharing every core. ${SECS} s cells after ${WARMUP} s warm-up, $IDLE idle sessions, a $FANOUT-stream fan-out. Numbers show costs, not scaling, and are not comparable with a full sweep."
fi
echo "Legacy echo unless named, sessions = concurrency, every answer verified. Load average before: $LOAD0, after: $(cut -d' ' -f1 /proc/loadavg)."
echo
echo "| cell | cores | c | req/s | target tree CPU µs/req | p50 / p99 µs | errors / wrong | notes |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
printf '%s' "$ROWS"
echo
echo "Idle Legacy sessions held (\`run\`):"
echo
echo "| sessions | cores | req/s across them | gateway RSS before → after | per session | errors / wrong |"
echo "|---:|---:|---:|---:|---:|---:|"
echo "${SCALE_ROW:-| $IDLE | – | – | – | – | **not run**: the gateway did not start |}"
echo
echo "Fan-out: one \`tools/list_changed\` to every listen stream (\`bench --fanout\`):"
echo
echo "| cores | streams | delivered | p50 / p99 / max µs | errors |"
echo "|---:|---:|---:|---:|---:|"
echo "${FAN_ROW:-| – | $FANOUT | – | – | **not run** |}"
} | tee "$OUT/results.md"
