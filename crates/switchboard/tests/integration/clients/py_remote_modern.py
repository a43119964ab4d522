"""A real 2026-07-28 client, the official Python SDK 2.3.0's `Client` pinned to 2026-07-28
(stateless: no handshake, no session), against a remote MCP server (directly when the server
speaks that era, otherwise through the gateway).

Usage: py_remote_modern.py URL SPEC  (SPEC as in py_remote_legacy.py; `logTool` is ignored:
a 2026-07-28 server sends log messages only on the request that opts in, which this client
does for every request with `log_level="info"`).

Lists tools, calls echo, calls the progress tool with a progress callback (its notifications
and any log messages are recorded). Prints one JSON object; the Rust test asserts on it.
"""
import asyncio
import json
import sys

from mcp.client import Client

ECHOED = "hello from the python sdk 2.3"


def text(result):
    return result.content[0].text


async def run(url, spec):
    logs = []
    progress = []

    async def on_log(params):
        logs.append([params.level, params.data])

    async def on_progress(value, total, _message):
        progress.append([value, total])

    async with Client(
        url,
        mode="2026-07-28",
        read_timeout_seconds=30,
        logging_callback=on_log,
        log_level="info",
    ) as client:
        tools = await client.list_tools()
        echo = await client.call_tool(spec["echo"]["tool"], {spec["echo"]["arg"]: ECHOED})
        done = await client.call_tool(
            spec["progress"]["tool"], spec["progress"]["args"], progress_callback=on_progress
        )
        return {
            "protocolVersion": client.protocol_version,
            "tools": sorted(t.name for t in tools.tools),
            "echoSent": ECHOED,
            "echo": text(echo),
            "progressResult": text(done),
            "progress": progress,
            "logsDuringProgress": logs,
        }


async def main():
    url, spec = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(await asyncio.wait_for(run(url, spec), timeout=90)))


if __name__ == "__main__":
    asyncio.run(main())
