"""A real legacy HTTP+SSE client (the official Python SDK's `sse_client`, mcp 1.x) against the
gateway's /sse. Two clients side by side each list tools and call `echo` concurrently, with the
same request ids (the SDK numbers each session's requests from 0) and answers out of order.
Prints one JSON object with what each saw; the Rust test asserts on it."""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.sse import sse_client


def text(result):
    return result.content[0].text


async def client(url, name, delay_ms):
    async with sse_client(url, timeout=30, sse_read_timeout=60) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            slow, fast = await asyncio.gather(
                session.call_tool("echo", {"text": f"{name}-slow", "delayMs": delay_ms}),
                session.call_tool("echo", {"text": f"{name}-fast"}),
            )
            return {
                "server": init.serverInfo.name,
                "protocolVersion": init.protocolVersion,
                "tools": sorted(t.name for t in tools.tools),
                "slow": text(slow),
                "fast": text(fast),
            }


async def main(url):
    a, b = await asyncio.wait_for(
        asyncio.gather(client(url, "a", 300), client(url, "b", 50)), timeout=60
    )
    print(json.dumps({"a": a, "b": b}))


asyncio.run(main(sys.argv[1]))
