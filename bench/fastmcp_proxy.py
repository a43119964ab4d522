"""A FastMCP proxy in front of a stdio MCP server, for bench/peers.sh.

    python fastmcp_proxy.py PORT CMD [ARGS...]

Serves Streamable HTTP at http://127.0.0.1:PORT/mcp. One backend in the config, so FastMCP
does not prefix tool names. This is the documented way to proxy with FastMCP (`create_proxy`
with an MCP config); nothing is tuned, as a user would run it.
"""

import sys

from fastmcp.server import create_proxy


def main() -> None:
    port, cmd = int(sys.argv[1]), sys.argv[2:]
    config = {"mcpServers": {"fixture": {"command": cmd[0], "args": cmd[1:]}}}
    proxy = create_proxy(config, name="fixture-proxy")
    proxy.run(
        transport="http",
        host="127.0.0.1",
        port=port,
        path="/mcp",
        log_level="warning",
        show_banner=False,
    )


if __name__ == "__main__":
    main()
