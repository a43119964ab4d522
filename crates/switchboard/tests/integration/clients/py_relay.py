"""A real client that can be asked for input: the official Python SDK 2.3.0's `Client` with
elicitation, sampling and roots callbacks, in MODE `legacy` (initialize handshake; the server
asks with real requests on the session) or `2026-07-28` (stateless; the SDK answers each
`input_required` result and retries). Calls each TOOL once with no arguments.

Usage: py_relay.py URL MODE TOOL...

Prints one JSON object: {"protocolVersion", "results": {tool: {"text"} | {"error", "code"}},
"asked": [method...]} (what the callbacks were asked, in order).
"""
import asyncio
import json
import sys

from mcp import types
from mcp.client import Client
from mcp.shared.exceptions import MCPError


async def run(url, mode, tools):
    asked = []

    async def elicitation(_ctx, params):
        asked.append("elicitation/create")
        return types.ElicitResult(
            action="accept",
            content={"name": "Py", "color": "green", "ok": True, "username": "py"},
        )

    async def sampling(_ctx, params):
        asked.append("sampling/createMessage")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Paris"),
            model="py-model",
        )

    async def list_roots(_ctx):
        asked.append("roots/list")
        return types.ListRootsResult(roots=[types.Root(uri="file:///py", name="py")])

    results = {}
    async with Client(
        url,
        mode=mode,
        read_timeout_seconds=30,
        elicitation_callback=elicitation,
        sampling_callback=sampling,
        list_roots_callback=list_roots,
    ) as client:
        for tool in tools:
            try:
                result = await client.call_tool(tool, {})
                texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
                results[tool] = {"text": texts[0] if texts else None,
                                 "isError": bool(result.is_error)}
            except MCPError as e:
                results[tool] = {"error": e.error.message, "code": e.error.code}
        version = client.protocol_version
    return {"protocolVersion": version, "results": results, "asked": asked}


async def main():
    url, mode, tools = sys.argv[1], sys.argv[2], sys.argv[3:]
    print(json.dumps(await asyncio.wait_for(run(url, mode, tools), timeout=90)))


if __name__ == "__main__":
    asyncio.run(main())
