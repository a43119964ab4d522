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
#
# Scenarios expected to fail are listed, each with the issue that removes it, in
# conformance/expected-failures-<PROFILE>.yml; the suite fails on any unexpected failure *and*
# on any listed scenario that now passes (a stale entry).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROFILE="${1:-2025-11-25}"
GATEWAY=()
case "$PROFILE" in
  2025-11-25) SELECT=(--spec-version 2025-11-25); ERA=dual ;;
  2025-11-25-per-session) SELECT=(--spec-version 2025-11-25); ERA=dual; GATEWAY=(--isolation per-session) ;;
  2026-07-28) SELECT=(--requirements 2026-07-28); ERA=dual ;;
  2026-07-28-bridge) SELECT=(--requirements 2026-07-28); ERA=legacy ;;
  2026-07-28-bridge-per-session) SELECT=(--requirements 2026-07-28); ERA=legacy; GATEWAY=(--isolation per-session) ;;
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
"$BIN" run --host 127.0.0.1 --port 0 ${GATEWAY[@]+"${GATEWAY[@]}"} -- "$BIN" fixture --era "$ERA" >"$LOG" 2>"$LOG.err" &
GW=$!
trap 'kill $GW 2>/dev/null || true; wait $GW 2>/dev/null || true; rm -f "$LOG" "$LOG.err"' EXIT

URL=""
for _ in $(seq 1 300); do
  URL="$(sed -n 's/^switchboard: listening on //p' "$LOG")"
  [ -n "$URL" ] && break
  kill -0 $GW 2>/dev/null || { cat "$LOG" "$LOG.err"; echo "conformance: gateway exited"; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { echo "conformance: gateway did not start"; exit 1; }
echo "conformance: suite $SUITE, profile $PROFILE (fixture era $ERA), gateway $URL"

rm -rf "$RESULTS"
npx --yes "$SUITE" server --url "$URL" "${SELECT[@]}" \
  --expected-failures "$ROOT/conformance/expected-failures-$PROFILE.yml" -o "$RESULTS"
