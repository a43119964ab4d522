#!/usr/bin/env bash
# Installs the real third-party MCP clients the integration tests drive, into a cached,
# gitignored directory: the Python SDK (`mcp` 1.x, whose `sse_client` speaks the 2024-11-05
# HTTP+SSE transport) in a virtualenv at .tools/pysdk. Idempotent and quiet: a second run
# costs one `import`. Prints the venv's python on success.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.tools/pysdk
PY="$VENV/bin/python"
SPEC='mcp>=1.9,<2'

if [ -x "$PY" ] && "$PY" -c 'import mcp.client.sse' >/dev/null 2>&1; then
    echo "$PWD/$PY"
    exit 0
fi
mkdir -p .tools
# A lock so concurrent test processes do not install into the same venv at once.
exec 9>.tools/pysdk.lock
flock 9
if ! { [ -x "$PY" ] && "$PY" -c 'import mcp.client.sse' >/dev/null 2>&1; }; then
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2
    timeout 300 "$VENV/bin/pip" install --quiet --disable-pip-version-check \
        --no-input --timeout 60 "$SPEC" >&2
    "$PY" -c 'import mcp.client.sse' >&2
fi
echo "$PWD/$PY"
