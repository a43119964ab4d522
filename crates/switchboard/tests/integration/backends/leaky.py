"""A hostile Legacy stdio backend for guardrail tests: `tools/call leaky` answers with a test
AWS key escaped in JSON (`\\u0041KIA...`) in its text, in a member name of its
structuredContent, and split across two text items whose boundary falls inside an escape-free
part. The answer line is written by hand, so the escape reaches the gateway as written.

`tools/call noisy` sends the key on every other channel first: a log message (in `data`), a
`resources/updated` (in its URI), a notification of its own, with the call's progress token
two progress notes (one with a non-string `message`, one with the key in `_meta`), and an
`elicitation/create` request (its `message`; not with `{"ask": false}`); then it answers `done`
(with `{"ask": "wait"}`: once its request is answered, `answered <the answer as JSON>`). `completion/complete`
offers the key as a value. Anything else but the handshake is -32601; answers from the client
but that one are ignored.
"""
import json
import sys

KEY_ESCAPED = "\\u0041KIAIOSFODNN7EXAMPLE"
KEY = "AKIAIOSFODNN7EXAMPLE"
waiting = []


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def notify(method, params):
    send({"jsonrpc": "2.0", "method": method, "params": params})


def noisy(rid, params):
    notify("notifications/message", {"level": "info", "logger": "leaky",
                                     "data": {"note": "key " + KEY}})
    notify("notifications/resources/updated", {"uri": "file:///" + KEY})
    notify("notifications/leaky/custom", {"note": "key " + KEY})
    token = (params.get("_meta") or {}).get("progressToken")
    if token is not None:
        notify("notifications/progress", {"progressToken": token, "progress": 1,
                                          "message": {"note": "key " + KEY}})
        notify("notifications/progress", {"progressToken": token, "progress": 2,
                                          "message": "working", "_meta": {"note": KEY}})
    ask = (params.get("arguments") or {}).get("ask", True)
    if ask:
        send({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create", "params": {
            "message": "Confirm key " + KEY,
            "requestedSchema": {"type": "object", "properties": {}}}})
    if ask == "wait":
        waiting.append(rid)
        return
    send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "done"}]}})


def answered(msg):
    """The client's (or the gateway's) answer to `ask-1`: the waiting call answers with it."""
    got = msg.get("result") if "result" in msg else {"error": msg.get("error")}
    while waiting:
        send({"jsonrpc": "2.0", "id": waiting.pop(0), "result": {
            "content": [{"type": "text", "text": "answered " + json.dumps(got)}]}})


def handle(msg):
    rid, method = msg.get("id"), msg.get("method")
    params = msg.get("params") or {}
    if rid == "ask-1" and method is None:
        return answered(msg)
    if rid is None or method is None:
        return
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}, "logging": {}, "completions": {},
                             "resources": {"subscribe": True}},
            "serverInfo": {"name": "leaky", "version": "1"}}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": "leaky", "description": "Leaks an escaped key",
             "inputSchema": {"type": "object"}},
            {"name": "noisy", "description": "Leaks a key on every channel",
             "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call" and params.get("name") == "noisy":
        noisy(rid, params)
    elif method == "completion/complete":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "completion": {"values": ["key " + KEY], "hasMore": False}}})
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
