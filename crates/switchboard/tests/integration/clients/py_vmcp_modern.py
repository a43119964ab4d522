"""A real 2026-07-28 client, the official Python SDK 2.3.0's `Client` pinned to 2026-07-28
(stateless: no handshake, no session), driven line by line by a Rust test (the virtual server
behind `switchboard serve`).

Usage: py_vmcp_modern.py URL

Prints {"ready": true, "protocolVersion", "server"} once connected, then answers one JSON
command per stdin line with one JSON line, exactly as py_vmcp_legacy.py does (`list`, `call`,
`quit`). Lists bypass the SDK's result cache: each `list` must show what the gateway lists
now (a backend that went down or came back), not what an earlier answer allowed caching.
"""
import asyncio
import json
import sys
import time

from mcp.client import Client
from mcp.shared.exceptions import MCPError

# As in py_vmcp_legacy.py: a call nobody answers becomes an error the test can see.
CALL_TIMEOUT = 10.0
MAX_PAGES = 50


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def list_all(client):
    names, cursor = [], None
    for page in range(1, MAX_PAGES + 1):
        result = await client.list_tools(cursor=cursor, cache_mode="bypass")
        names.extend(t.name for t in result.tools)
        cursor = result.next_cursor
        if cursor is None:
            return {"tools": names, "pages": page}
    return {"error": "tools/list did not end within %d pages" % MAX_PAGES}


async def call(client, name, arguments):
    started = time.monotonic()
    ms = lambda: int((time.monotonic() - started) * 1000)  # noqa: E731
    try:
        result = await client.call_tool(name, arguments, read_timeout_seconds=CALL_TIMEOUT)
    except MCPError as e:
        return {"error": e.error.message, "code": e.error.code, "ms": ms()}
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    return {"text": texts[0] if texts else None, "isError": bool(result.is_error), "ms": ms()}


async def serve(client):
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            return
        cmd = json.loads(line)
        if cmd["op"] == "list":
            try:
                say(await list_all(client))
            except MCPError as e:
                say({"error": e.error.message, "code": e.error.code})
        elif cmd["op"] == "call":
            say(await call(client, cmd["name"], cmd.get("arguments") or {}))
        else:
            return


async def main():
    async with Client(sys.argv[1], mode="2026-07-28", read_timeout_seconds=30) as client:
        info = client.server_info
        say({"ready": True, "protocolVersion": client.protocol_version,
             "server": info.name if info else None})
        await serve(client)


if __name__ == "__main__":
    asyncio.run(main())
