"""A Legacy stdio backend that records what reaches it, for the strict-input tests.

Reads one line at a time and answers in order (no threads), so the order of its answers is
the order of the lines it read.
- Every raw line is counted: `tools/call seen` answers `{"bad": N, "control": M,
  "garbled": G, "lines": L}`, the number of lines containing `BAD-MARKER` / `CONTROL-MARKER` /
  `garble`, and all lines so far.
- `tools/call garble` is answered as a backend that could not parse the line answers:
  `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,...}}`.
- `tools/call hold` is not answered until the next `tools/call release`, which answers both;
  `tools/call held` answers how many calls are held.
- `tools/call echo` answers its `text` argument.
"""
import json
import sys

counts = {"bad": 0, "control": 0, "garbled": 0, "lines": 0}
held = []


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def text(rid, t):
    send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": t}]}})


def parse_error():
    send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})


def call(rid, params):
    global held
    name = params.get("name")
    args = params.get("arguments") or {}
    if name == "seen":
        text(rid, json.dumps(counts))
    elif name == "garble":
        parse_error()
    elif name == "hold":
        held.append(rid)
    elif name == "held":
        text(rid, str(len(held)))
    elif name == "release":
        for h in held:
            text(h, "held")
        held = []
        text(rid, "released")
    else:
        text(rid, str(args.get("text", "")))


for line in sys.stdin:
    counts["lines"] += 1
    counts["bad"] += "BAD-MARKER" in line
    counts["control"] += "CONTROL-MARKER" in line
    counts["garbled"] += "garble" in line
    try:
        msg = json.loads(line)
    except ValueError:
        parse_error()
        continue
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-11-25",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "recorder", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": n, "inputSchema": {"type": "object"}}
            for n in ["seen", "garble", "hold", "held", "release", "echo"]]}})
    elif method == "tools/call":
        call(rid, msg.get("params") or {})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
