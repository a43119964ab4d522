#!/usr/bin/env bash
# Installs Debian's `redis-server` for the replica tests (tests/integration/replicas*), when
# missing: as root, or through sudo. The tests start their own servers on free loopback ports
# and never touch one they did not start. Idempotent and quiet; prints the binary's path.
set -euo pipefail

if ! command -v redis-server >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        echo "redis-server is missing and neither root nor passwordless sudo is available" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-cache show redis-server >/dev/null 2>&1 || timeout 300 "${SUDO[@]}" apt-get update -qq >&2
    timeout 600 "${SUDO[@]}" apt-get install -y -qq --no-install-recommends redis-server >&2
    # The package starts a system server on 6379; the tests use their own.
    command -v systemctl >/dev/null && "${SUDO[@]}" systemctl stop redis-server >/dev/null 2>&1 || true
fi
command -v redis-server
