"""A dual-era stdio backend that stops speaking 2026-07-28 when told to (as a server might after
an in-place downgrade): afterwards every Modern request, `server/discover` included, gets
-32022 listing only Legacy versions. Legacy requests keep working throughout.
"""
import json
import sys

modern = True
MODERN_KEY = "io.modelcontextprotocol/protocolVersion"


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    method, rid = msg["method"], msg["id"]
    params = msg.get("params") or {}
    is_modern = MODERN_KEY in (params.get("_meta") or {})
    if is_modern and not modern:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32022, "message": "Unsupported protocol version",
              "data": {"supported": ["2025-11-25"], "requested": "2026-07-28"}}})
    elif method == "server/discover":
        send({"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete", "supportedVersions": ["2026-07-28"],
              "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "public",
              "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "shifty", "version": "1"}}}})
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
              "serverInfo": {"name": "shifty", "version": "1"}}})
    elif method == "tools/call" and params.get("name") == "downgrade":
        modern = False
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "legacy only now"}]}})
    elif method == "tools/call":
        text = "modern" if is_modern else "legacy"
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "nope"}})
