"""A remote MCP server nobody here wrote the protocol code of: the official Python SDK 2.3's
`MCPServer` over its own Streamable HTTP transport (both eras on one endpoint: the 2025-11-25
`initialize` handshake with `Mcp-Session-Id`, and stateless 2026-07-28 requests).

Usage: py_http_server.py  (run with the venv `scripts/install-test-clients.sh modern` makes)

Binds 127.0.0.1 port 0 itself and prints `listening on PORT` once the socket is bound, so the
test never races another process for a port it released. The endpoint is `/mcp`.

Tools:
- `echo(text)` answers `py: <text>`.
- `progress(steps)` reports progress 1..steps (of steps) and logs one info line per step
  (`step i`), then answers `done <steps>`: progress reaches a client only if it sent a
  progress token, logs only on a Legacy session (or a Modern request that opts in).
"""
import socket
import warnings
import sys

import anyio
import uvicorn

from mcp.server.mcpserver import Context, MCPServer

# `ctx.info` is the deprecated (SEP-2577) logging feature, used on purpose: keep stderr quiet.
warnings.filterwarnings("ignore", message="The logging capability is deprecated")

server = MCPServer(name="py-http-server", version="2.3-test", log_level="WARNING")


@server.tool(description="Echoes its text back, prefixed with `py: `.")
async def echo(text: str) -> str:
    return f"py: {text}"


@server.tool(description="Reports progress 1..steps and logs each step.")
async def progress(steps: int, ctx: Context) -> str:
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
        await ctx.info(f"step {i}")
    return f"done {steps}"


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    anyio.run(main)
