#!/usr/bin/env bash
# Installs Debian's `bubblewrap` (bwrap) for the sandbox tests (tests/integration/sandbox*,
# crates/upstream's sandbox tests), when missing: as root, or through sudo. Then checks that
# it can build a sandbox here (user namespaces allowed), since a bwrap that cannot is as
# useless to the tests as none. Idempotent and quiet; prints the binary's path.
set -euo pipefail

if ! command -v bwrap >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        echo "bwrap is missing and neither root nor passwordless sudo is available" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-cache show bubblewrap >/dev/null 2>&1 || timeout 300 "${SUDO[@]}" apt-get update -qq >&2
    timeout 600 "${SUDO[@]}" apt-get install -y -qq --no-install-recommends bubblewrap >&2
fi
# As the gateway runs it: a root gateway's backends run as nobody (setpriv, util-linux).
AS=()
if [ "$(id -u)" -eq 0 ]; then
    AS=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
fi
if ! "${AS[@]}" bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all --die-with-parent \
    --new-session true; then
    echo "bwrap is installed but cannot create namespaces here (unprivileged user" \
        "namespaces disabled, or a container's seccomp profile)" >&2
    exit 1
fi
command -v bwrap
