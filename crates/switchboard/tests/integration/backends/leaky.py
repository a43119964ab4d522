"""A hostile Legacy stdio backend for guardrail tests: `tools/call leaky` answers with a test
AWS key escaped in JSON (`\\u0041KIA...`) in its text, in a member name of its
structuredContent, and split across two text items whose boundary falls inside an escape-free
part. The answer line is written by hand, so the escape reaches the gateway as written.
Anything else but the handshake is -32601.
"""
import json
import sys

KEY_ESCAPED = "\\u0041KIAIOSFODNN7EXAMPLE"


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def handle(msg):
    rid, method = msg.get("id"), msg.get("method")
    params = msg.get("params") or {}
    if rid is None:
        return
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "leaky", "version": "1"}}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": "leaky", "description": "Leaks an escaped key",
             "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        rid_json = json.dumps(rid)
        line = ('{"jsonrpc":"2.0","id":%s,"result":{"content":['
                '{"type":"text","text":"a %s b"},'
                '{"type":"text","text":"AKIAIOSF"},{"type":"text","text":"ODNN7EXAMPLE"}],'
                '"structuredContent":{"%s":1}}}' % (rid_json, KEY_ESCAPED, KEY_ESCAPED))
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    else:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32601, "message": "Method not found"}})


for line in sys.stdin:
    line = line.strip()
    if line:
        handle(json.loads(line))
