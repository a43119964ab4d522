#!/usr/bin/env bash
# Installs what the status-page test (tests/integration/ui.rs) drives: Debian's `chromium`
# (apt, when missing: as root, or through sudo) and `playwright-core` (npm, pinned, cached in
# the gitignored .tools/playwright). Idempotent and quiet: a second run costs two probes.
# Prints two lines: the chromium binary, then playwright-core's node_modules directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Exact: a new release must be a deliberate change, not something a test run picks up.
PLAYWRIGHT_VERSION=1.65.1

chromium_bin() {
    command -v chromium || command -v chromium-browser || true
}

if [ -z "$(chromium_bin)" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        echo "chromium is missing and neither root nor passwordless sudo is available" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # `update` only when the package is unknown (a fresh image has no lists).
    apt-cache show chromium >/dev/null 2>&1 || timeout 300 "${SUDO[@]}" apt-get update -qq >&2
    timeout 900 "${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium >&2
fi
CHROMIUM="$(chromium_bin)"
[ -n "$CHROMIUM" ] || { echo "chromium did not install" >&2; exit 1; }

dir=.tools/playwright
pkg="$dir/node_modules/playwright-core/package.json"
ready() { grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$pkg" 2>/dev/null; }
if ! ready; then
    mkdir -p .tools
    # A lock so concurrent test processes do not install into the same directory at once.
    exec 9>"$dir.lock"
    flock 9
    if ! ready; then
        rm -rf "$dir"
        mkdir -p "$dir"
        printf '{"name":"switchboard-ui-test","private":true,"dependencies":{"playwright-core":"%s"}}\n' \
            "$PLAYWRIGHT_VERSION" >"$dir/package.json"
        timeout 300 npm install --prefix "$dir" --silent --no-audit --no-fund \
            --no-update-notifier >&2
        ready || { echo "playwright-core $PLAYWRIGHT_VERSION did not install" >&2; exit 1; }
    fi
fi
echo "$CHROMIUM"
echo "$PWD/$dir/node_modules"
