#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, unit + integration tests, and the
# official conformance suite through the gateway. Needs only the Rust toolchain, Python 3 and
# Node/npm (the script installs Node 22 for the conformance suite itself, and MkDocs for the
# documentation check).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# A clean checkout gains nothing from incremental caches, and they are a large part of a debug
# target folder; disk is what a CI machine runs short of first.
export CARGO_INCREMENTAL=0

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
LOG="$(mktemp)"
DOCS_LOG="$(mktemp)"
trap 'rm -f "$LOG" "$DOCS_LOG"' EXIT
# The status-page test needs Chromium and playwright-core: installed here (apt, npm), and
# SWITCHBOARD_UI_TESTS makes the test fail rather than skip when they are missing.
echo "== install chromium + playwright-core (status page test)"
scripts/install-chromium.sh >/dev/null
# The replica tests need a real redis-server (each test starts its own on a free port), and
# SWITCHBOARD_REDIS_TESTS makes them fail rather than skip when it is missing.
echo "== install redis-server (replica tests)"
scripts/install-redis.sh >/dev/null
# The sandbox tests need bubblewrap (bwrap) that can create namespaces here, and
# SWITCHBOARD_SANDBOX_TESTS makes them fail rather than skip when it is missing.
echo "== install bubblewrap (sandbox tests)"
scripts/install-bwrap.sh >/dev/null
# Opt in to the test against the real @modelcontextprotocol/server-everything (npm).
SWITCHBOARD_NPX_TESTS=1 SWITCHBOARD_UI_TESTS=1 SWITCHBOARD_REDIS_TESTS=1 SWITCHBOARD_SANDBOX_TESTS=1 cargo test --workspace 2>&1 | tee "$LOG"
# The conformance runs use the gateway binary this `cargo test` built.
export SWITCHBOARD_BIN="$PWD/target/debug/switchboard"
# The documentation check (scripts/docs.sh: MkDocs strict build, links and anchors, every
# documented command and config against this binary, the metrics reference against a running
# gateway) runs beside the conformance profiles, which mostly wait on the network stack; its
# output is printed when it ends.
echo "== docs (scripts/docs.sh, in the background)"
scripts/docs.sh >"$DOCS_LOG" 2>&1 &
DOCS_PID=$!
echo "== disk: target folder $(du -sh target 2>/dev/null | cut -f1), $(df -h . | awk 'NR==2 {print $4}') free"
PROFILES=0
for profile in 2025-11-25 2025-11-25-per-session 2026-07-28 2026-07-28-bridge \
  2026-07-28-bridge-per-session 2025-11-25-remote 2026-07-28-remote \
  2026-07-28-remote-legacy 2025-11-25-serve 2026-07-28-serve 2026-07-28-serve-bridge \
  2025-11-25-sandbox 2025-11-25-per-session-sandbox 2026-07-28-sandbox \
  2026-07-28-bridge-sandbox 2026-07-28-bridge-per-session-sandbox; do
  # The *-sandbox profiles run the fixture in bubblewrap (installed above).
  echo "== conformance $profile (through the gateway, built-in fixture)"
  scripts/conformance.sh "$profile"
  PROFILES=$((PROFILES + 1))
done
# The Tasks extension's scenarios, unscored under --requirements 2026-07-28, run by name (any
# failed check fails): against the fixture itself, through `run`, and through `serve` with the
# task-capable backend second of three.
for mode in direct run serve; do
  echo "== conformance tasks-$mode (the suite's tasks-* scenarios by name)"
  scripts/conformance-tasks.sh "$mode"
  PROFILES=$((PROFILES + 1))
done
# The client leg: the gateway as the MCP client of each scenario's mock server.
for revision in 2025-11-25 2026-07-28; do
  echo "== conformance client $revision (the gateway as the client)"
  scripts/conformance-client.sh "$revision"
  PROFILES=$((PROFILES + 1))
done

echo "== docs"
if ! wait "$DOCS_PID"; then
  cat "$DOCS_LOG"
  echo "docs check failed"
  exit 1
fi
cat "$DOCS_LOG"

# One closing line for everything cargo ran (the last runner output above is the conformance
# suite's, and cargo's last own line is its doc-tests, often empty).
awk -v profiles="$PROFILES" '
  /^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i } }
  END { printf "conformance profiles passed: %d\nsummary: %d passed, %d failed\n", profiles, p, f }
' "$LOG"
