"""A Legacy stdio backend whose tool list is long, paginated, and can grow (virtual server
tests: upstream pages followed, our own cursors, `list_changed` re-deriving the merged list).

Usage: growy.py COUNT PAGE

- `tools/list`: tools `g0000`.. `g<COUNT-1>`, then any grown ones, PAGE per page (`nextCursor`
  is the next offset as a string; anything else is -32602).
- `tools/call grow {name}`: adds tool `name`, writes `notifications/tools/list_changed`, then
  answers `grown <name>` (so a client holding the answer knows the notification went first).
- `tools/call <listed name>`: answers `<name> from growy`; an unlisted name is -32602.
- `server/discover` and anything else: -32601 (Legacy only).
"""
import json
import sys

COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 10
PAGE = int(sys.argv[2]) if len(sys.argv) > 2 else 100
tools = ["g%04d" % i for i in range(COUNT)] + ["grow"]


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def error(rid, code, message):
    send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})


def text(rid, t):
    send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": t}]}})


def tool(name):
    return {"name": name, "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}


def tools_list(rid, params):
    cursor = params.get("cursor", "0")
    if not isinstance(cursor, str) or not cursor.isdigit():
        return error(rid, -32602, "bad cursor")
    start = int(cursor)
    page = {"tools": [tool(n) for n in tools[start:start + PAGE]]}
    if start + PAGE < len(tools):
        page["nextCursor"] = str(start + PAGE)
    send({"jsonrpc": "2.0", "id": rid, "result": page})


def call(rid, params):
    name = params.get("name")
    if name == "grow":
        grown = (params.get("arguments") or {}).get("name", "grown")
        tools.append(grown)
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text(rid, "grown " + grown)
    if name in tools:
        return text(rid, name + " from growy")
    error(rid, -32602, "Unknown tool: %s" % name)


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    method, rid = msg["method"], msg["id"]
    params = msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-11-25",
              "capabilities": {"tools": {"listChanged": True}},
              "serverInfo": {"name": "growy", "version": "1"}}})
    elif method == "tools/list":
        tools_list(rid, params)
    elif method == "tools/call":
        call(rid, params)
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    else:
        error(rid, -32601, "Method not found")
