"""A Legacy stdio backend for the `Mcp-Param-*` designation cache (`core::tool_headers`).

Usage: toolsy.py [FAIL_FIRST [LIST_DELAY_MS]]

- `tools/list` counts itself; the first FAIL_FIRST of them answer an error, the rest answer
  after LIST_DELAY_MS with one tool, `regional`, whose `region` argument is mirrored in
  `Mcp-Param-Region`.
- `tools/call regional` answers `ok`; `tools/call stats` answers
  `{"toolsList": <count>, "regional": <calls of regional>}`.
Each request is handled on its own thread, so a slow `tools/list` never delays `stats`.
"""
import json
import sys
import threading
import time

FAIL_FIRST = int(sys.argv[1]) if len(sys.argv) > 1 else 0
LIST_DELAY = (int(sys.argv[2]) if len(sys.argv) > 2 else 0) / 1000.0
lock = threading.Lock()
lists = 0
calls = 0

TOOLS = [{"name": "regional", "inputSchema": {"type": "object", "properties": {
    "region": {"type": "string", "x-mcp-header": "Region"}}}}]


def send(msg):
    with lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def text(rid, t):
    send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": t}]}})


def tools_list(rid):
    global lists
    with lock:
        lists += 1
        n = lists
    if n <= FAIL_FIRST:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "not ready"}})
        return
    time.sleep(LIST_DELAY)
    send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})


def count_call():
    global calls
    with lock:
        calls += 1


def handle(msg):
    method, rid = msg["method"], msg["id"]
    params = msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-11-25",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "toolsy", "version": "1"}}})
    elif method == "tools/list":
        tools_list(rid)
    elif method == "tools/call" and params.get("name") == "stats":
        with lock:
            n, c = lists, calls
        text(rid, json.dumps({"toolsList": n, "regional": c}))
    elif method == "tools/call":
        count_call()
        text(rid, "ok")
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})


for line in sys.stdin:
    msg = json.loads(line)
    if "id" in msg and "method" in msg:
        threading.Thread(target=handle, args=(msg,), daemon=True).start()
