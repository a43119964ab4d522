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

# ContextForge cannot front a stdio server by itself: its `mcpgateway.translate` bridge exposes
# the fixture over Streamable HTTP, the gateway (SQLite, stateful sessions, no auth for the MCP
# path, loopback targets allowed, its default 100 requests a minute rate limit off) registers the bridge as a gateway, and a virtual server
# exposes its `fixture-echo`. Both processes run under one shell, so the CPU column covers the
# bridge and its fixture too. Secrets are fresh random values for this throwaway instance.
contextforge_run() {
  local dir="$OUT/contextforge" py="$PEERS/contextforge/bin/python"
  rm -rf "$dir" && mkdir -p "$dir"
  local version; version=$("$PEERS/contextforge/bin/pip" show mcp-contextforge-gateway 2>/dev/null | awk '/^Version:/ {print $2}')
  local label="ContextForge gateway $version"
  local gw bridge secret
  gw=$(free_port); bridge=$(free_port)
  secret=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
  local env=(JWT_SECRET_KEY="$secret"
    AUTH_ENCRYPTION_SECRET="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
    PLATFORM_ADMIN_PASSWORD="$(python3 -c 'import secrets; print("Aa1!" + secrets.token_urlsafe(16))')"
    BASIC_AUTH_PASSWORD="$(python3 -c 'import secrets; print("Aa1!" + secrets.token_urlsafe(16))')"
    AUTH_REQUIRED=false MCPGATEWAY_UI_ENABLED=false MCPGATEWAY_ADMIN_API_ENABLED=true
    DATABASE_URL="sqlite:///$dir/mcp.db" SSRF_ALLOW_LOCALHOST=true USE_STATEFUL_SESSIONS=true
    RATE_LIMITING_ENABLED=false TOOL_RATE_LIMIT=100000000 LOG_LEVEL=ERROR)
  URL="http://127.0.0.1:$gw/health"
  echo "driving $label…" >&2
  # shellcheck disable=SC2016
  if ! start_peer contextforge env "${env[@]}" sh -c \
      '"$1" -m mcpgateway.translate --stdio "$2" --expose-streamable-http --host 127.0.0.1 --port "$3" --logLevel error & exec "$4" --host 127.0.0.1 --port "$5"' \
      _ "$py" "${FIXTURE[*]}" "$bridge" "$PEERS/contextforge/bin/mcpgateway" "$gw"; then
    skip contextforge "$label" "did not start: $(tail -1 "$OUT/contextforge.log" | tr '|' '/')"
    stop_peer; return 0
  fi
  local token api="http://127.0.0.1:$gw" registered="" tool="" server=""
  token=$(env "${env[@]}" "$py" -m mcpgateway.utils.create_jwt_token --username admin@example.com \
    --exp 60 --secret "$secret" 2>/dev/null | tail -1)
  local auth=(-H "authorization: Bearer $token" -H 'content-type: application/json')
  for _ in $(seq 40); do
    registered=$(curl -s -m 10 -X POST "$api/gateways" "${auth[@]}" \
      -d "{\"name\":\"fixture\",\"url\":\"http://127.0.0.1:$bridge/mcp\",\"transport\":\"STREAMABLEHTTP\"}" | jq -r '.id // empty')
    [ -n "$registered" ] && break
    sleep 0.5
  done
  [ -n "$registered" ] && tool=$(curl -s -m 10 "$api/tools" "${auth[@]}" | jq -r '.[] | select(.name == "fixture-echo") | .id')
  [ -n "$tool" ] && server=$(curl -s -m 10 -X POST "$api/servers" "${auth[@]}" \
    -d "{\"server\":{\"name\":\"bench\",\"associated_tools\":[\"$tool\"]}}" | jq -r '.id // empty')
  if [ -z "$server" ]; then
    skip contextforge "$label" "set up but not drivable: gateway ${registered:-not registered}, tool ${tool:-not found}, server not created"
    stop_peer; return 0
  fi
  URL="$api/servers/$server/mcp"
  local r; r=$(drive contextforge --tool fixture-echo --echo)
  stop_peer
  row contextforge "$label" "$r" "one shared fixture behind its \`mcpgateway.translate\` bridge; a virtual server; SQLite; rate limit off; tool \`fixture-echo\`"
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
