#!/usr/bin/env bash
# Runs the official MCP conformance suite's *client* leg with the gateway as the client.
#
#   scripts/conformance-client.sh REVISION      (2025-11-25 | 2026-07-28)
#
# A gateway is an MCP client of its upstreams. For each scenario of the revision's client
# requirement set (`--requirements REVISION`) the suite starts a mock MCP server and runs
# scripts/conformance-client-driver.py with its URL; the driver starts
# `switchboard run --url <that URL>` on a free loopback port, waits for /readyz, does through
# the gateway what the scenario expects of a client (list and call tools, answer an
# elicitation with its defaults, fulfil an input request, ...), and stops the gateway. What
# the suite judges is what the gateway sent upstream: headers, Mcp-Param-*, per-request
# metadata, SSE resumption, schema handling, requestState.
#
# Scenarios expected to fail are listed, each with its reason, in
# conformance/expected-failures-client-<REVISION>.yml; the suite fails on any unexpected
# failure *and* on any listed scenario that now passes (a stale entry).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REVISION="${1:-}"
case "$REVISION" in
  2025-11-25 | 2026-07-28) ;;
  *) echo "conformance-client: usage: $0 2025-11-25|2026-07-28" >&2; exit 2 ;;
esac
RESULTS="$ROOT/conformance/results/client-$REVISION"

NAME=conformance-client
# shellcheck source=scripts/conformance-common.sh
. "$ROOT/scripts/conformance-common.sh"
export SWITCHBOARD_BIN="$BIN"
# The driver logs the gateway's own lines; warnings and errors are what a failure needs.
export SWITCHBOARD_LOG="${SWITCHBOARD_LOG:-warn}"

echo "conformance-client: suite $SUITE, client requirements $REVISION, gateway $BIN"
rm -rf "$RESULTS"
# The suite runs every scenario at once, each with a gateway of its own.
npx --yes "$SUITE" client --command "python3 $ROOT/scripts/conformance-client-driver.py" \
  --requirements "$REVISION" \
  --expected-failures "$ROOT/conformance/expected-failures-client-$REVISION.yml" -o "$RESULTS"
