"""A Legacy stdio backend whose one tool answers with the `_meta` its call arrived with (trace
tests: what trace context the gateway hands a backend).

- `tools/call meta`: answers the call's `params._meta` as JSON text (`{}` when absent).
- `tools/list`: the one tool. Anything else but the handshake and `ping` is -32601.
"""
import json
import sys


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    rid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if rid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-11-25"),
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "meta", "version": "1"}}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": [{"name": "meta", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call" and params.get("name") == "meta":
        text = json.dumps(params.get("_meta") or {})
        result = {"content": [{"type": "text", "text": text}]}
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not found"}})
        continue
    send({"jsonrpc": "2.0", "id": rid, "result": result})
