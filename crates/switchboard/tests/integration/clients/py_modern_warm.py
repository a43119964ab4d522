"""A real 2026-07-28 (Modern, stateless) client: the official Python SDK 2.3.0's `Client`,
pinned to 2026-07-28 (no initialize handshake, no session), against a per-session gateway
whose backend speaks only the handshake era. Calls the fixture's `pid` tool twice, then opens
a `subscriptions/listen` for the watched resource, triggers an update of it, and waits for the
event. Prints one JSON object with what it saw; the Rust test asserts on it."""
import asyncio
import json
import sys

from mcp.client import Client
from mcp.shared.subscriptions import ResourceUpdated

WATCHED = "test://watched-resource"


def text(result):
    return result.content[0].text


async def run(url):
    async with Client(url, mode="2026-07-28", read_timeout_seconds=30) as client:
        pids = [text(await client.call_tool("pid", {})) for _ in range(2)]
        async with client.listen(resource_subscriptions=[WATCHED]) as sub:
            honored = list(sub.honored.resource_subscriptions or [])
            trigger = await client.call_tool(
                "trigger", {"kind": "resource_updated", "uri": WATCHED}
            )
            event = await anext(aiter(sub))
        return {
            "protocolVersion": client.protocol_version,
            "pids": pids,
            "honored": honored,
            "triggerError": bool(trigger.is_error),
            "event": {"type": type(event).__name__, "uri": getattr(event, "uri", None)},
            "pidAfter": text(await client.call_tool("pid", {})),
        }


async def main(url):
    print(json.dumps(await asyncio.wait_for(run(url), timeout=60)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
