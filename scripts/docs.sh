#!/usr/bin/env bash
# Builds the documentation site (docs/, MkDocs pinned in scripts/docs-requirements.txt, into
# target/docs-site) and checks it: strict build (every internal link and anchor, the nav),
# the configuration reference current with the JSON Schema, and scripts/docs-check.py (every
# `switchboard …` command against its --help, every YAML config through `switchboard
# validate`, README's links into docs/, the metrics reference against the code's registry and a
# running gateway). Installs MkDocs into a virtual environment on first use; needs Python 3.
# Takes SWITCHBOARD_BIN (else builds target/debug/switchboard).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${SWITCHBOARD_DOCS_VENV:-$PWD/target/docs-venv}"
if ! cmp -s scripts/docs-requirements.txt "$VENV/docs-requirements.txt" 2>/dev/null; then
  echo "== docs: installing MkDocs into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r scripts/docs-requirements.txt
  cp scripts/docs-requirements.txt "$VENV/docs-requirements.txt"
fi

BIN="${SWITCHBOARD_BIN:-}"
if [ -z "$BIN" ]; then
  cargo build --quiet -p switchboard
  BIN="$PWD/target/debug/switchboard"
fi

echo "== docs: configuration reference current with schema/switchboard.schema.json"
python3 scripts/gen-config-reference.py --check
echo "== docs: mkdocs build --strict"
# Not --quiet: it hides the warnings that strict mode counts, and the build then passes.
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
if ! "$VENV/bin/mkdocs" build --strict >"$LOG" 2>&1; then
  grep -v '^INFO' "$LOG" >&2
  exit 1
fi
echo "== docs: commands, configs, README links, metrics reference"
"$VENV/bin/python" scripts/docs-check.py --bin "$BIN"
