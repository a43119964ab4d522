#!/usr/bin/env bash
# Installs the real third-party MCP clients the integration tests drive, into cached,
# gitignored virtualenvs under .tools/. With no argument (or `sse`): the Python SDK 1.x
# (`mcp` 1.x, whose `sse_client` speaks the 2024-11-05 HTTP+SSE transport) at .tools/pysdk.
# With `modern`: the Python SDK 2.3.0 (whose client speaks 2026-07-28) at .tools/pysdk2.
# Idempotent and quiet: a second run costs one `import`. Prints the venv's python on success.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-sse}" in
    sse) VENV=.tools/pysdk SPEC='mcp>=1.9,<2' PROBE='import mcp.client.sse' ;;
    modern) VENV=.tools/pysdk2 SPEC='mcp==2.3.0' \
        PROBE='import importlib.metadata as m, mcp.client; assert m.version("mcp") == "2.3.0"' ;;
    *) echo "usage: $0 [sse|modern]" >&2; exit 2 ;;
esac
PY="$VENV/bin/python"

if [ -x "$PY" ] && "$PY" -c "$PROBE" >/dev/null 2>&1; then
    echo "$PWD/$PY"
    exit 0
fi
mkdir -p .tools
# A lock per venv so concurrent test processes do not install into the same one at once.
exec 9>"$VENV.lock"
flock 9
if ! { [ -x "$PY" ] && "$PY" -c "$PROBE" >/dev/null 2>&1; }; then
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2
    timeout 300 "$VENV/bin/pip" install --quiet --disable-pip-version-check \
        --no-input --timeout 60 "$SPEC" >&2
    "$PY" -c "$PROBE" >&2
fi
echo "$PWD/$PY"
