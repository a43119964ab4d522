# Sourced by bench/peers.sh: installing the peers, and the peers whose setup is more than one
# command line. Expects PEERS, OUT, SB, FIXTURE and run_target from peers.sh.

# install_peers: every peer into $PEERS, once (a stamp file per peer; delete it to reinstall).
# A failed install is recorded in $PEERS/<peer>.failed with the reason, and the peer's row says so.
install_peers() {
  mkdir -p "$PEERS"
  local log
  if [ ! -e "$PEERS/supergateway.ok" ]; then
    log="$PEERS/supergateway.log"
    if npm install --silent --no-audit --no-fund --prefix "$PEERS/npm" supergateway@4 >"$log" 2>&1; then
      touch "$PEERS/supergateway.ok"
    else tail -1 "$log" >"$PEERS/supergateway.failed"; fi
  fi
  # One venv per Python peer: their dependency pins (mcp, starlette, pydantic) disagree.
  py_peer py-mcp-proxy 'mcp-proxy==0.13.0'
  py_peer fastmcp fastmcp
  py_peer contextforge mcp-contextforge-gateway
  # PEERS_NO_CARGO=1 skips this compile (its row then says so); the lock keeps two runs from
  # compiling into the same root at once.
  if [ ! -e "$PEERS/rust-mcp-proxy.ok" ] && [ -z "${PEERS_NO_CARGO:-}" ]; then
    log="$PEERS/rust-mcp-proxy.log"
    echo "compiling mcp-proxy@0.6.0 from crates.io (once, several minutes)…" >&2
    if flock "$PEERS/rust-mcp-proxy.lock" sh -c '[ -e "$1/rust-mcp-proxy.ok" ] ||
        cargo install --locked --quiet --root "$1/cargo" mcp-proxy@0.6.0' _ "$PEERS" >"$log" 2>&1; then
      touch "$PEERS/rust-mcp-proxy.ok"
      rm -f "$PEERS/rust-mcp-proxy.failed"
    else grep -m1 -E '^error' "$log" >"$PEERS/rust-mcp-proxy.failed" || tail -1 "$log" >"$PEERS/rust-mcp-proxy.failed"; fi
  elif [ ! -e "$PEERS/rust-mcp-proxy.ok" ]; then
    echo "not compiled in this run (PEERS_NO_CARGO set)" >"$PEERS/rust-mcp-proxy.failed"
  fi
}

# py_peer NAME REQUIREMENT: a venv at $PEERS/NAME with REQUIREMENT installed by pip.
py_peer() {
  local name=$1 req=$2 log="$PEERS/$1.log"
  [ -e "$PEERS/$name.ok" ] && return 0
  rm -f "$PEERS/$name.failed"
  if python3 -m venv "$PEERS/$name" >"$log" 2>&1 &&
     "$PEERS/$name/bin/pip" install --quiet --disable-pip-version-check "$req" >>"$log" 2>&1; then
    touch "$PEERS/$name.ok"
  else
    grep -m1 -iE 'requires-python|requires a different python|no matching distribution|^error' "$log" \
      >"$PEERS/$name.failed" || tail -1 "$log" >"$PEERS/$name.failed"
  fi
}

# ContextForge installs (its Requires-Python is ">=3.11,<3.14"), but it cannot front a stdio
# server by itself: that takes a separate `mcpgateway.translate` bridge process, the gateway
# with a database, a JWT minted for its admin API, the bridge registered as a gateway, and a
# virtual server created over the discovered tools. Not automated yet.
contextforge_why() {
  echo "installed ($("$PEERS/contextforge/bin/pip" show mcp-contextforge-gateway 2>/dev/null | awk '/^Version:/ {print $2}'), Python $(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') is within its >=3.11,<3.14), not driven: a stdio server needs its separate translate bridge, a database, a JWT for the admin API, a registered gateway and a virtual server; that setup is not automated here yet"
}

# The Rust mcp-proxy reads a TOML config; tools come back as `<backend><separator><tool>`.
# URL_TEMPLATE is set for this one call only (bash scopes a prefix assignment to a function
# call for its duration).
rust_mcp_proxy_run() {
  local cfg="$OUT/rust-mcp-proxy.toml"
  cat >"$cfg" <<TOML
[proxy]
name = "bench"
separator = "_"

[proxy.listen]
host = "127.0.0.1"
port = @PORT@

[[backends]]
name = "fixture"
transport = "stdio"
command = "$SB"
args = ["fixture"]
TOML
  local port; port=$(free_port)
  sed -i "s/@PORT@/$port/" "$cfg"
  # It serves MCP at the root path, not /mcp.
  URL_TEMPLATE="http://127.0.0.1:@PORT@/" FIXED_PORT=$port run_target rust-mcp-proxy "mcp-proxy 0.6.0 (Rust)" \
    "one shared fixture; tool \`fixture_echo\`" --tool fixture_echo --echo -- \
    "$PEERS/cargo/bin/mcp-proxy" --config "$cfg"
}
