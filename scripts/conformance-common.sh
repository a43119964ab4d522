# Sourced by scripts/conformance.sh, conformance-tasks.sh and conformance-client.sh: what
# every run of the official suite needs. The sourcing script sets ROOT and NAME (its name in
# messages) first.

SUITE="@modelcontextprotocol/conformance@0.2.0-alpha.12"
TOOLS="$ROOT/.tools"

# The suite needs Node >= 22; the machines have Node 20. The npm package node@22 ships a binary.
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' 2>/dev/null; then
  if [ ! -x "$TOOLS/node22/node_modules/.bin/node" ]; then
    echo "$NAME: installing Node 22 from the npm registry into $TOOLS/node22"
    npm install --prefix "$TOOLS/node22" --no-audit --no-fund --loglevel=error node@22 >/dev/null
  fi
  export PATH="$TOOLS/node22/node_modules/.bin:$PATH"
fi

# scripts/test.sh hands over the binary its `cargo test` built (SWITCHBOARD_BIN): a second
# `cargo build` resolves features differently and compiles the dependencies a second time,
# which doubled the target folder (CI once ran out of disk doing that).
if [ -n "${SWITCHBOARD_BIN:-}" ]; then
  BIN="$SWITCHBOARD_BIN"
else
  cargo build --quiet --bin switchboard
  BIN="$ROOT/target/debug/switchboard"
fi
[ -x "$BIN" ] || { echo "$NAME: no gateway binary at $BIN" >&2; exit 2; }

# Waits (SECS, default 30 s, at most) for `PREFIX<url>` in FILE while process PID lives; prints
# the URL.
wait_url() {
  local file="$1" prefix="$2" pid="$3" what="$4" secs="${5:-30}" url=""
  for _ in $(seq 1 $((secs * 10))); do
    url="$(sed -n "s|^$prefix||p" "$file" | head -n 1)"
    [ -n "$url" ] && { echo "$url"; return 0; }
    kill -0 "$pid" 2>/dev/null || { cat "$file" "$file.err" >&2; echo "$NAME: $what exited" >&2; return 1; }
    sleep 0.1
  done
  echo "$NAME: $what did not start" >&2
  return 1
}
