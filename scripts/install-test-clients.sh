#!/usr/bin/env bash
# Installs the real third-party MCP clients the integration tests drive, into cached,
# gitignored directories under .tools/. With no argument (or `sse`): the Python SDK 1.x
# (`mcp` 1.x, whose `sse_client` speaks the 2024-11-05 HTTP+SSE transport) at .tools/pysdk.
# With `modern`: the Python SDK 2.3.0 (whose client speaks 2026-07-28) at .tools/pysdk2.
# With `ts`: the TypeScript SDK (`@modelcontextprotocol/sdk`, pinned, with its
# StreamableHTTPClientTransport) at .tools/tssdk; prints its node_modules directory.
# With `oidc`: panva's `oidc-provider` (pinned; the authorization server of the per-user OAuth
# end-to-end tests) at .tools/oidc; prints its node_modules directory.
# With `servers`: the reference servers @modelcontextprotocol/server-filesystem and
# server-everything (pinned; the sandbox tests run them with no network, so they are installed
# beforehand) at .tools/server-filesystem and .tools/server-everything; prints both
# node_modules directories, one a line.
# Idempotent and quiet: a second run costs one probe. Prints the venv's python on success.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The TypeScript SDK 1.x release the tests are written against (exact: a new release must be
# a deliberate change, not something a test run picks up).
TS_SDK_VERSION=1.32.2

# oidc-provider's last 8.x release: 9.x wants Node 22, and the machines and CI have Node 20.
OIDC_PROVIDER_VERSION=8.8.1

# The reference servers' release the sandbox tests run (the one scripts/conformance.sh and
# tests/integration/everything.rs pin for server-everything).
SERVERS_VERSION=2026.8.31

# Installs npm package $2 at exact version $3 into .tools/$1 (unless it is there already,
# with $4, a file inside the package, present); prints the node_modules directory.
install_npm() {
    local dir=".tools/$1" name="$2" version="$3"
    local pkg="$dir/node_modules/$name/package.json"
    local probe="$dir/node_modules/$name/$4"
    npm_ready() {
        [ -f "$probe" ] && grep -q "\"version\": \"$version\"" "$pkg" 2>/dev/null
    }
    if npm_ready; then
        echo "$PWD/$dir/node_modules"
        return
    fi
    mkdir -p .tools
    # A lock so concurrent test processes do not install into the same directory at once.
    exec 9>"$dir.lock"
    flock 9
    if ! npm_ready; then
        rm -rf "$dir"
        mkdir -p "$dir"
        printf '{"name":"switchboard-test-clients","private":true,"type":"module",%s}\n' \
            "\"dependencies\":{\"$name\":\"$version\"}" >"$dir/package.json"
        timeout 300 npm install --prefix "$dir" --silent --no-audit --no-fund \
            --no-update-notifier >&2
        npm_ready || { echo "$name $version did not install" >&2; exit 1; }
    fi
    echo "$PWD/$dir/node_modules"
}

case "${1:-sse}" in
    sse) VENV=.tools/pysdk SPEC='mcp>=1.9,<2' PROBE='import mcp.client.sse' ;;
    modern) VENV=.tools/pysdk2 SPEC='mcp==2.3.0' \
        PROBE='import importlib.metadata as m, mcp.client; assert m.version("mcp") == "2.3.0"' ;;
    ts) install_npm tssdk @modelcontextprotocol/sdk "$TS_SDK_VERSION" \
        dist/esm/client/streamableHttp.js; exit 0 ;;
    oidc) install_npm oidc oidc-provider "$OIDC_PROVIDER_VERSION" lib/index.js; exit 0 ;;
    servers)
        install_npm server-filesystem @modelcontextprotocol/server-filesystem \
            "$SERVERS_VERSION" dist/index.js
        install_npm server-everything @modelcontextprotocol/server-everything \
            "$SERVERS_VERSION" dist/index.js
        exit 0 ;;
    *) echo "usage: $0 [sse|modern|ts|oidc|servers]" >&2; exit 2 ;;
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
