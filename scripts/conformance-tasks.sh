#!/usr/bin/env bash
# Runs every scenario of the conformance suite's Tasks extension (`io.modelcontextprotocol/
# tasks`, SEP-2663) by name, and fails on any failed check. `--requirements 2026-07-28` runs
# them unscored (an extension is never scored), so scripts/conformance.sh would not notice one
# failing.
#
#   scripts/conformance-tasks.sh [MODE]
#
# Modes:
#   direct   the fixture itself (`fixture --http`, dual era), no gateway
#   run      through `switchboard run` with the fixture on stdio (dual era)
#   serve    through `switchboard serve` with three backends, the task-capable tools on the
#            SECOND: a remote dual-era fixture first, the stdio fixture second (first in
#            priority, so the suite's bare tool names resolve to it), a Legacy-only stdio
#            fixture third. A task method that went to the first backend would find no task.
#
# Every scenario's checks are read from its checks.json under conformance/results/tasks-MODE;
# any FAILURE (or a scenario that wrote none) fails the run. WARNING/INFO/SKIPPED do not.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE="${1:-direct}"
case "$MODE" in direct | run | serve) ;; *) echo "conformance-tasks: unknown mode $MODE" >&2; exit 2 ;; esac
SCENARIOS=(tasks-lifecycle tasks-capability-negotiation tasks-wire-fields
  tasks-request-state-removal tasks-mrtr-input tasks-request-headers
  tasks-dispatch-and-envelope tasks-status-notifications tasks-required-task-error
  tasks-mrtr-composition)
RESULTS="$ROOT/conformance/results/tasks-$MODE"

NAME=conformance-tasks
# shellcheck source=scripts/conformance-common.sh
. "$ROOT/scripts/conformance-common.sh"

LOG="$(mktemp)"
FXLOG="$(mktemp)"
CONFIG="$(mktemp --suffix .yaml)"
PIDS=""
cleanup() {
  for pid in $PIDS; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -f "$LOG" "$LOG.err" "$FXLOG" "$FXLOG.err" "$CONFIG"
}
trap cleanup EXIT

case "$MODE" in
  direct)
    "$BIN" fixture --http --host 127.0.0.1 --port 0 --era dual >"$FXLOG" 2>"$FXLOG.err" &
    PIDS="$!"
    URL="$(wait_url "$FXLOG" "switchboard fixture: listening on " "$!" "fixture")"
    ;;
  run)
    "$BIN" run --host 127.0.0.1 --port 0 -- "$BIN" fixture --era dual >"$LOG" 2>"$LOG.err" &
    PIDS="$!"
    URL="$(wait_url "$LOG" "switchboard: listening on " "$!" "gateway")"
    ;;
  serve)
    "$BIN" fixture --http --host 127.0.0.1 --port 0 --era dual >"$FXLOG" 2>"$FXLOG.err" &
    PIDS="$!"
    FXURL="$(wait_url "$FXLOG" "switchboard fixture: listening on " "$!" "remote fixture")"
    json() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
    cat >"$CONFIG" <<YAML
listen: {host: 127.0.0.1, port: 0}
aggregation: {conflictResolution: priority, priority: [tasks, first, third]}
backends:
  - name: first
    url: $(json "$FXURL")
  - name: tasks
    command: $(json "$BIN")
    args: [fixture, --era, dual]
  - name: third
    command: $(json "$BIN")
    args: [fixture, --era, legacy]
YAML
    "$BIN" serve --config "$CONFIG" >"$LOG" 2>"$LOG.err" &
    PIDS="$PIDS $!"
    URL="$(wait_url "$LOG" "switchboard: listening on " "$!" "gateway")"
    ;;
esac
echo "conformance-tasks: suite $SUITE, mode $MODE, server $URL"

rm -rf "$RESULTS"
mkdir -p "$RESULTS"
FAILED=()
for scenario in "${SCENARIOS[@]}"; do
  # The suite's own exit status is not enough: extension scenarios are unscored.
  npx --yes "$SUITE" server --url "$URL" --scenario "$scenario" -o "$RESULTS" >"$RESULTS/$scenario.log" 2>&1 || true
  checks="$(find "$RESULTS" -path "*$scenario*" -name checks.json | head -n 1)"
  verdict="$(python3 - "$checks" <<'PY'
import json, sys
path = sys.argv[1]
if not path:
    print("FAIL (no checks.json)")
    sys.exit()
checks = json.load(open(path))
failed = [c for c in checks if c.get("status") == "FAILURE"]
passed = sum(c.get("status") == "SUCCESS" for c in checks)
if failed:
    print("FAIL " + "; ".join(f"{c.get('id')}: {c.get('errorMessage', '')}" for c in failed))
else:
    print(f"ok ({passed} checks passed)")
PY
)"
  echo "conformance-tasks: $scenario: $verdict"
  case "$verdict" in ok*) ;; *) FAILED+=("$scenario") ;; esac
done
if [ "${#FAILED[@]}" -gt 0 ]; then
  echo "conformance-tasks: mode $MODE: ${#FAILED[@]} scenario(s) failed: ${FAILED[*]} (logs in $RESULTS)" >&2
  exit 1
fi
echo "conformance-tasks: mode $MODE: all ${#SCENARIOS[@]} scenarios passed"
