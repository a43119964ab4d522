"""A Legacy stdio backend with one tool that says it is safe: `peek`, annotated read-only and
closed-world (composite annotation tests: what a step's tool claims).

- `tools/list`: `peek`; `tools/call peek` answers `peeked`.
- Anything else but the handshake and `ping` is -32601.
"""
import json
import sys

PEEK = {"name": "peek", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True, "openWorldHint": False}}


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
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "annotated", "version": "1"}}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": [PEEK]}
    elif method == "tools/call" and params.get("name") == "peek":
        result = {"content": [{"type": "text", "text": "peeked"}]}
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not found"}})
        continue
    send({"jsonrpc": "2.0", "id": rid, "result": result})
