#!/usr/bin/env bash
# Runs the official MCP conformance suite *through* the gateway, against the built-in fixture.
#
#   scripts/conformance.sh [PROFILE]
#
# Profiles:
#   2025-11-25         --spec-version 2025-11-25, fixture in dual-era mode (default)
#   2025-11-25-per-session  the same with one backend process per session
#   2026-07-28         --requirements 2026-07-28, fixture in dual-era mode (Modern pass-through)
#   2026-07-28-bridge  --requirements 2026-07-28, fixture Legacy-only (the gateway bridges)
#   2026-07-28-bridge-per-session  the same with per-session isolation (MRTR bridged: each
#                      call that may ask for input runs on its own backend process)
#   2025-11-25-remote  --spec-version 2025-11-25 through `run --url`: the fixture is a remote
#                      server (`fixture --http`, dual-era), each client session its own
#                      upstream session there
#   2026-07-28-remote  --requirements 2026-07-28 through `run --url` (remote dual-era fixture:
#                      Modern requests pass through statelessly)
#   2026-07-28-remote-legacy  the same against a Legacy-only remote fixture: Modern clients are
#                      bridged onto upstream sessions partitioned by principal and capabilities
#
# Scenarios expected to fail are listed, each with the issue that removes it, in
# conformance/expected-failures-<PROFILE>.yml; the suite fails on any unexpected failure *and*
# on any listed scenario that now passes (a stale entry).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROFILE="${1:-2025-11-25}"
GATEWAY=()
REMOTE=no
case "$PROFILE" in
  2025-11-25) SELECT=(--spec-version 2025-11-25); ERA=dual ;;
  2025-11-25-per-session) SELECT=(--spec-version 2025-11-25); ERA=dual; GATEWAY=(--isolation per-session) ;;
  2026-07-28) SELECT=(--requirements 2026-07-28); ERA=dual ;;
  2026-07-28-bridge) SELECT=(--requirements 2026-07-28); ERA=legacy ;;
  2026-07-28-bridge-per-session) SELECT=(--requirements 2026-07-28); ERA=legacy; GATEWAY=(--isolation per-session) ;;
  2025-11-25-remote) SELECT=(--spec-version 2025-11-25); ERA=dual; REMOTE=yes ;;
  2026-07-28-remote) SELECT=(--requirements 2026-07-28); ERA=dual; REMOTE=yes ;;
  2026-07-28-remote-legacy) SELECT=(--requirements 2026-07-28); ERA=legacy; REMOTE=yes ;;
  *) echo "conformance: unknown profile $PROFILE" >&2; exit 2 ;;
esac
SUITE="@modelcontextprotocol/conformance@0.2.0-alpha.12"
TOOLS="$ROOT/.tools"
RESULTS="$ROOT/conformance/results/$PROFILE"

# The suite needs Node >= 22; the machines have Node 20. The npm package node@22 ships a binary.
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' 2>/dev/null; then
  if [ ! -x "$TOOLS/node22/node_modules/.bin/node" ]; then
    echo "conformance: installing Node 22 from the npm registry into $TOOLS/node22"
    npm install --prefix "$TOOLS/node22" --no-audit --no-fund --loglevel=error node@22 >/dev/null
  fi
  export PATH="$TOOLS/node22/node_modules/.bin:$PATH"
fi

cargo build --quiet --bin switchboard
BIN="$ROOT/target/debug/switchboard"

LOG="$(mktemp)"
FXLOG="$(mktemp)"
GW=""
FX=""
cleanup() {
  for pid in $GW $FX; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -f "$LOG" "$LOG.err" "$FXLOG" "$FXLOG.err"
}
trap cleanup EXIT

# Waits (30 s at most) for `PREFIX<url>` in FILE while process PID lives; prints the URL.
wait_url() {
  local file="$1" prefix="$2" pid="$3" what="$4" url=""
  for _ in $(seq 1 300); do
    url="$(sed -n "s|^$prefix||p" "$file" | head -n 1)"
    [ -n "$url" ] && { echo "$url"; return 0; }
    kill -0 "$pid" 2>/dev/null || { cat "$file" "$file.err" >&2; echo "conformance: $what exited" >&2; return 1; }
    sleep 0.1
  done
  echo "conformance: $what did not start" >&2
  return 1
}

if [ "$REMOTE" = yes ]; then
  # The fixture as a remote MCP server; the gateway fronts its URL instead of a command.
  "$BIN" fixture --http --host 127.0.0.1 --port 0 --era "$ERA" >"$FXLOG" 2>"$FXLOG.err" &
  FX=$!
  FXURL="$(wait_url "$FXLOG" "switchboard fixture: listening on " "$FX" "remote fixture")"
  BACKEND=(--url "$FXURL")
else
  BACKEND=(-- "$BIN" fixture --era "$ERA")
fi
"$BIN" run --host 127.0.0.1 --port 0 ${GATEWAY[@]+"${GATEWAY[@]}"} "${BACKEND[@]}" >"$LOG" 2>"$LOG.err" &
GW=$!
URL="$(wait_url "$LOG" "switchboard: listening on " "$GW" "gateway")"
if [ "$REMOTE" = yes ]; then
  echo "conformance: suite $SUITE, profile $PROFILE (remote fixture era $ERA at $FXURL), gateway $URL"
else
  echo "conformance: suite $SUITE, profile $PROFILE (fixture era $ERA), gateway $URL"
fi

rm -rf "$RESULTS"
npx --yes "$SUITE" server --url "$URL" "${SELECT[@]}" \
  --expected-failures "$ROOT/conformance/expected-failures-$PROFILE.yml" -o "$RESULTS"
