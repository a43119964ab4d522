"""A strict stdio MCP backend for gateway tests.

It refuses a second `initialize` (as rmcp-based and other strict servers do), counts every
`notifications/initialized` it receives, and offers a `stats` tool reporting what it saw, so a
test can prove the gateway handshakes once for many clients.
"""
import json
import sys

initialized = 0
initialize_calls = 0


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if "id" not in msg:
        if method == "notifications/initialized":
            initialized += 1
        continue
    if method == "initialize":
        initialize_calls += 1
        if initialize_calls > 1:
            send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32600, "message": "already initialized"}})
            continue
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "strict", "version": "1"}}})
    elif method == "tools/call":
        stats = {"initialize": initialize_calls, "initialized": initialized}
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "content": [{"type": "text", "text": json.dumps(stats)}]}})
    else:
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "nope"}})
