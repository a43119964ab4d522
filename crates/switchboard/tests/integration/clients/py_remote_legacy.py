"""A real handshake-era client, the official Python SDK 1.x (`mcp` 1.x), against a remote MCP
server (directly or through the gateway).

Usage: py_remote_legacy.py URL TRANSPORT SPEC
- TRANSPORT: `streamable` (Streamable HTTP, `streamable_http_client`) or `sse` (the 2024-11-05
  HTTP+SSE transport, `sse_client`; URL is then the SSE endpoint).
- SPEC (JSON) names the server's tools: {"echo": {"tool", "arg"}, "progress": {"tool", "args"},
  "logTool": optional tool that starts the server logging to this session}.

Initializes, lists tools, calls echo, calls the progress tool with a progress callback (its
notifications and any log messages are recorded), then, with a logTool, calls it and waits
(bounded) for a log message to arrive (`logToolResult` is its answer). Prints one JSON
object; the Rust test asserts on it.
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

ECHOED = "hello from the python sdk 1.x"


def text(result):
    return result.content[0].text


def transport(url, kind):
    if kind == "sse":
        return sse_client(url, timeout=30, sse_read_timeout=60)
    return streamable_http_client(url)


async def run(url, kind, spec):
    logs = []
    log_arrived = asyncio.Event()
    progress = []

    async def on_log(params):
        logs.append([params.level, params.data])
        log_arrived.set()

    async def on_progress(value, total, _message):
        progress.append([value, total])

    async with transport(url, kind) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, logging_callback=on_log) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            echo = await session.call_tool(spec["echo"]["tool"], {spec["echo"]["arg"]: ECHOED})
            done = await session.call_tool(
                spec["progress"]["tool"], spec["progress"]["args"], progress_callback=on_progress
            )
            out = {
                "protocolVersion": init.protocolVersion,
                "server": init.serverInfo.name,
                "tools": sorted(t.name for t in tools.tools),
                "echoSent": ECHOED,
                "echo": text(echo),
                "progressResult": text(done),
                "progress": progress,
                "logsDuringProgress": list(logs),
            }
            if spec.get("logTool"):
                log_arrived.clear()
                out["logToolResult"] = text(await session.call_tool(spec["logTool"], {}))
                # The server logs once at once and then every few seconds: one must arrive.
                await asyncio.wait_for(log_arrived.wait(), timeout=20)
                out["logs"] = list(logs)
                await session.call_tool(spec["logTool"], {})  # toggles it off again
            return out


async def main():
    url, kind, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    print(json.dumps(await asyncio.wait_for(run(url, kind, spec), timeout=90)))


if __name__ == "__main__":
    asyncio.run(main())
