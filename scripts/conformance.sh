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
#   2025-11-25-serve   --spec-version 2025-11-25 through `switchboard serve` (the virtual
#                      server) with three backends: the fixture (`fixture --era dual`, first
#                      in priority, `isolation: per-session`), @modelcontextprotocol/
#                      server-everything (npx, per-session), and a remote dual-era fixture
#                      (`fixture --http`, reached statelessly), plus a REST API behind an
#                      OpenAPI backend (the OpenAPI tests' recording server and spec)
#   2026-07-28-serve   --requirements 2026-07-28, the same three backends
#   2026-07-28-serve-bridge  --requirements 2026-07-28 through `serve` with the fixture
#                      Legacy-only, on stdio (per-session) and remote: Modern clients are
#                      bridged onto partitions per (principal, backend), MRTR included
#   PROFILE-sandbox    a stdio profile above (2025-11-25, 2025-11-25-per-session,
#                      2026-07-28, 2026-07-28-bridge, 2026-07-28-bridge-per-session) with the
#                      fixture in a bubblewrap sandbox (`sandbox: on`; needs bwrap,
#                      scripts/install-bwrap.sh): `run` has no sandbox flag, so the gateway is
#                      `serve --config` of that one backend, with the fixture's directory
#                      bound read-only into the sandbox (it may be under a masked /home)
#
# Scenarios expected to fail are listed, each with the issue that removes it, in
# conformance/expected-failures-<PROFILE>.yml; the suite fails on any unexpected failure *and*
# on any listed scenario that now passes (a stale entry).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROFILE="${1:-2025-11-25}"
GATEWAY=()
REMOTE=no
SERVE=no
SANDBOX=no
BASE="$PROFILE"
case "$PROFILE" in
  2025-11-25-sandbox | 2025-11-25-per-session-sandbox | 2026-07-28-sandbox | \
    2026-07-28-bridge-sandbox | 2026-07-28-bridge-per-session-sandbox)
    SANDBOX=yes; BASE="${PROFILE%-sandbox}" ;;
esac
case "$BASE" in
  2025-11-25) SELECT=(--spec-version 2025-11-25); ERA=dual ;;
  2025-11-25-per-session) SELECT=(--spec-version 2025-11-25); ERA=dual; GATEWAY=(--isolation per-session) ;;
  2026-07-28) SELECT=(--requirements 2026-07-28); ERA=dual ;;
  2026-07-28-bridge) SELECT=(--requirements 2026-07-28); ERA=legacy ;;
  2026-07-28-bridge-per-session) SELECT=(--requirements 2026-07-28); ERA=legacy; GATEWAY=(--isolation per-session) ;;
  2025-11-25-remote) SELECT=(--spec-version 2025-11-25); ERA=dual; REMOTE=yes ;;
  2026-07-28-remote) SELECT=(--requirements 2026-07-28); ERA=dual; REMOTE=yes ;;
  2026-07-28-remote-legacy) SELECT=(--requirements 2026-07-28); ERA=legacy; REMOTE=yes ;;
  2025-11-25-serve) SELECT=(--spec-version 2025-11-25); ERA=dual; REMOTE=yes; SERVE=yes ;;
  2026-07-28-serve) SELECT=(--requirements 2026-07-28); ERA=dual; REMOTE=yes; SERVE=yes ;;
  2026-07-28-serve-bridge) SELECT=(--requirements 2026-07-28); ERA=legacy; REMOTE=yes; SERVE=yes ;;
  *) echo "conformance: unknown profile $PROFILE" >&2; exit 2 ;;
esac
# The same package spec crates/switchboard/tests/integration/everything.rs runs.
# Pinned: a new release may change what its lists hold.
EVERYTHING="@modelcontextprotocol/server-everything@2026.8.31"
RESULTS="$ROOT/conformance/results/$PROFILE"

NAME=conformance
# shellcheck source=scripts/conformance-common.sh
. "$ROOT/scripts/conformance-common.sh"

LOG="$(mktemp)"
FXLOG="$(mktemp)"
CONFIG="$(mktemp --suffix .yaml)"
RESTLOG="$(mktemp)"
SPEC="$(mktemp --suffix .yaml)"
GW=""
FX=""
REST=""
BINDIR=""
cleanup() {
  for pid in $GW $FX $REST; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -f "$LOG" "$LOG.err" "$FXLOG" "$FXLOG.err" "$RESTLOG" "$RESTLOG.err" "$SPEC" "$CONFIG"
  [ -z "$BINDIR" ] || rm -rf "$BINDIR"
}
trap cleanup EXIT

if [ "$REMOTE" = yes ]; then
  # The fixture as a remote MCP server; the gateway fronts its URL instead of a command.
  "$BIN" fixture --http --host 127.0.0.1 --port 0 --era "$ERA" >"$FXLOG" 2>"$FXLOG.err" &
  FX=$!
  FXURL="$(wait_url "$FXLOG" "switchboard fixture: listening on " "$FX" "remote fixture")"
  BACKEND=(--url "$FXURL")
else
  BACKEND=(-- "$BIN" fixture --era "$ERA")
fi
if [ "$SERVE" = yes ]; then
  # `priority` with the fixture first keeps every fixture name bare (the suite calls them by
  # name) and drops the others' colliding names; `conditional` would prefix *both* sides of
  # each collision (the remote fixture collides on every name). Command and URL are
  # JSON-quoted: JSON strings are YAML.
  json() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
  # A REST API behind an OpenAPI backend is in the set too (its tools are merged beside the
  # MCP backends' and must not disturb them): the OpenAPI tests' recording server and spec.
  OPENAPI="$ROOT/crates/switchboard/tests/integration/openapi"
  python3 "$OPENAPI/rest.py" >"$RESTLOG" 2>"$RESTLOG.err" &
  REST=$!
  RESTPORT="$(wait_url "$RESTLOG" "listening " "$REST" "REST API")"
  # The spec is a template (the tests fill in the version): 3.1 here, its servers unused.
  sed -e 's/VERSION/3.1.0/' -e 's|DECOY|http://127.0.0.1:1/|' \
    -e 's/TAG_SCHEMA/{type: [string, "null"]}/' "$OPENAPI/petstore.yaml" >"$SPEC"
  cat >"$CONFIG" <<YAML
listen: {host: 127.0.0.1, port: 0}
# npx may fetch server-everything first (as everything.rs allows: --startup-timeout 120).
timeouts: {startup: 120s}
aggregation: {conflictResolution: priority, priority: [fixture, everything, remote, petstore]}
backends:
  - name: fixture
    command: $(json "$BIN")
    args: [fixture, --era, $ERA]
    isolation: per-session
  - name: everything
    command: npx
    args: [-y, $(json "$EVERYTHING")]
    isolation: per-session
  - name: remote
    url: $(json "$FXURL")
  - name: petstore
    openapi: {spec: $(json "$SPEC"), baseUrl: $(json "http://127.0.0.1:$RESTPORT/v1")}
YAML
  "$BIN" serve --config "$CONFIG" >"$LOG" 2>"$LOG.err" &
elif [ "$SANDBOX" = yes ]; then
  # One sandboxed stdio backend, as `run` would front it: the same fixture, the same
  # isolation. The fixture is this binary, so its directory is bound read-only (a checkout
  # under /home or /root is masked otherwise).
  json() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
  # A root gateway's backends run as nobody: a binary nobody cannot reach (a checkout under
  # /root) is copied into a directory of its own that nobody can read.
  FXBIN="$BIN"
  if [ "$(id -u)" -eq 0 ] && ! setpriv --reuid=65534 --regid=65534 --clear-groups -- test -x "$BIN"; then
    BINDIR="$(mktemp -d)"
    chmod 755 "$BINDIR"
    cp "$BIN" "$BINDIR/switchboard"
    FXBIN="$BINDIR/switchboard"
  fi
  ISOLATION=shared
  [ "${GATEWAY[*]-}" = "--isolation per-session" ] && ISOLATION=per-session
  cat >"$CONFIG" <<YAML
listen: {host: 127.0.0.1, port: 0}
backends:
  - name: fixture
    command: $(json "$FXBIN")
    args: [fixture, --era, $ERA]
    isolation: $ISOLATION
    sandbox:
      filesystem: {read: [$(json "$(dirname "$FXBIN")")]}
YAML
  "$BIN" serve --config "$CONFIG" >"$LOG" 2>"$LOG.err" &
else
  "$BIN" run --host 127.0.0.1 --port 0 ${GATEWAY[@]+"${GATEWAY[@]}"} "${BACKEND[@]}" >"$LOG" 2>"$LOG.err" &
fi
GW=$!
# `serve` prints its address once every backend is up, and the first `npx` of
# server-everything may download it (the startup timeout above is 120 s).
WAIT=30
[ "$SERVE" = yes ] && WAIT=150
URL="$(wait_url "$LOG" "switchboard: listening on " "$GW" "gateway" "$WAIT")"
if [ "$SANDBOX" = yes ]; then
  # `serve` prints one line per backend saying how it is sandboxed; none means it is not (a
  # lone backend is served as `run` serves one, under the name `default`).
  grep -q '^switchboard: backend default sandboxed: bubblewrap' "$LOG" \
    || { cat "$LOG" "$LOG.err" >&2; echo "conformance: the fixture is not sandboxed" >&2; exit 1; }
  echo "conformance: suite $SUITE, profile $PROFILE (fixture era $ERA, sandboxed), gateway $URL"
elif [ "$SERVE" = yes ]; then
  echo "conformance: suite $SUITE, profile $PROFILE (serve: fixture era $ERA, $EVERYTHING, remote fixture at $FXURL), gateway $URL"
elif [ "$REMOTE" = yes ]; then
  echo "conformance: suite $SUITE, profile $PROFILE (remote fixture era $ERA at $FXURL), gateway $URL"
else
  echo "conformance: suite $SUITE, profile $PROFILE (fixture era $ERA), gateway $URL"
fi

rm -rf "$RESULTS"
npx --yes "$SUITE" server --url "$URL" "${SELECT[@]}" \
  --expected-failures "$ROOT/conformance/expected-failures-$PROFILE.yml" -o "$RESULTS"
