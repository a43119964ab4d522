"""A real handshake-era client, the official Python SDK 1.x (`mcp` 1.x) over Streamable HTTP,
driven line by line by a Rust test (the virtual server behind `switchboard serve`).

Usage: py_vmcp_legacy.py URL

Initializes one session, prints {"ready": true, "protocolVersion", "server"}, then reads one
JSON command per stdin line and answers each with one JSON line on stdout:
- {"op": "list"}: every page of tools/list, following `nextCursor` (at most 50 pages) ->
  {"tools": [names in order], "pages": N}, or {"error", "code"} when a page was refused
  (a cursor the list outdated when a backend left or came back mid-walk: the gateway's
  `-32602`, after which a client starts again)
- {"op": "call", "name", "arguments"} -> {"text": first text content, "isError", "ms"}, or
  {"error": message, "code", "ms"} when the call failed (a JSON-RPC error, or no answer
  within CALL_TIMEOUT: the SDK surfaces that as an error too)
- {"op": "quit"} (or end of input): closes the session and exits.
"""
import asyncio
import json
import sys
import time
from datetime import timedelta

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

# Far above any fast failure, far below the test's own deadline: a call nobody answers
# becomes an error the test can see instead of a hung client.
CALL_TIMEOUT = timedelta(seconds=10)
MAX_PAGES = 50


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def list_all(session):
    names, cursor = [], None
    for page in range(1, MAX_PAGES + 1):
        result = await session.list_tools(cursor=cursor)
        names.extend(t.name for t in result.tools)
        cursor = result.nextCursor
        if cursor is None:
            return {"tools": names, "pages": page}
    return {"error": "tools/list did not end within %d pages" % MAX_PAGES}


async def call(session, name, arguments):
    started = time.monotonic()
    ms = lambda: int((time.monotonic() - started) * 1000)  # noqa: E731
    try:
        result = await session.call_tool(name, arguments, read_timeout_seconds=CALL_TIMEOUT)
    except McpError as e:
        return {"error": e.error.message, "code": e.error.code, "ms": ms()}
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    return {"text": texts[0] if texts else None, "isError": bool(result.isError), "ms": ms()}


async def serve(session):
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            return
        cmd = json.loads(line)
        if cmd["op"] == "list":
            try:
                say(await list_all(session))
            except McpError as e:
                say({"error": e.error.message, "code": e.error.code})
        elif cmd["op"] == "call":
            say(await call(session, cmd["name"], cmd.get("arguments") or {}))
        else:
            return


async def main():
    async with streamable_http_client(sys.argv[1]) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            say({"ready": True, "protocolVersion": init.protocolVersion,
                 "server": init.serverInfo.name})
            await serve(session)


if __name__ == "__main__":
    asyncio.run(main())
