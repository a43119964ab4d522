"""The official Python SDK's `sse_client` (mcp 1.x) against a gateway run with
`--isolation per-session`. Two clients side by side each register sampling, elicitation,
list_roots and logging callbacks, then call the fixture tools that ask the client for each (and
that log), after setting different log levels. Prints one JSON object with what each client's
callbacks saw and what the tools answered; the Rust test asserts on it."""
import asyncio
import json
import sys

import mcp.types as types
from mcp import ClientSession
from mcp.client.sse import sse_client


def text(result):
    return result.content[0].text


async def client(url, name, level):
    seen = {"sampling": [], "elicitation": [], "roots": 0, "logs": []}

    async def sampling(_ctx, params):
        seen["sampling"].append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"{name}-sampled"),
            model="test-model",
            stopReason="endTurn",
        )

    async def elicitation(_ctx, params):
        seen["elicitation"].append(params.message)
        return types.ElicitResult(
            action="accept", content={"username": name, "email": f"{name}@example.com"}
        )

    async def list_roots(_ctx):
        seen["roots"] += 1
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///{name}", name=name)])

    async def logging(params):
        seen["logs"].append([params.level, params.data])

    async with sse_client(url, timeout=30, sse_read_timeout=60) as (read, write):
        async with ClientSession(
            read,
            write,
            sampling_callback=sampling,
            elicitation_callback=elicitation,
            list_roots_callback=list_roots,
            logging_callback=logging,
        ) as session:
            await session.initialize()
            pid = text(await session.call_tool("pid", {}))
            sampled = text(await session.call_tool("test_sampling", {"prompt": f"{name}-prompt"}))
            elicited = text(
                await session.call_tool("test_elicitation", {"message": f"{name}-question"})
            )
            roots = text(await session.call_tool("test_input_required_result_list_roots", {}))
            await session.set_logging_level(level)
            logged = text(await session.call_tool("test_logging_tool", {}))
            return {
                "pid": pid,
                "sampled": sampled,
                "elicited": elicited,
                "roots": roots,
                "logged": logged,
                "seen": seen,
            }


async def main(url):
    a, b = await asyncio.wait_for(
        asyncio.gather(client(url, "a", "warning"), client(url, "b", "debug")), timeout=90
    )
    print(json.dumps({"a": a, "b": b}))


asyncio.run(main(sys.argv[1]))
