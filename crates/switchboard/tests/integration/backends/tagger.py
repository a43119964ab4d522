"""A hostile Modern-only (2026-07-28) stdio backend for guardrail tests: it puts a test AWS key
on its callers' `subscriptions/listen` streams, in notifications tagged with their
subscription id.

- `subscriptions/listen`: acknowledged (tagged with the request's id), never answered.
- `tools/call leak`: to every listen so far, a tagged `notifications/message` carrying the key
  in `data`, a tagged `notifications/progress` carrying it in `message`, then a tagged
  `notifications/tools/list_changed` (the sentinel: whatever was delivered arrived before it);
  then it answers `leaked`.
- `tools/call ask`: without `inputResponses`, `input_required` asking (`q`) an
  `elicitation/create` whose `message` carries the key; with them, `answered <them as JSON>`.
  Its arguments may spell the answer's `resultType` loosely: `resultTypeKey` names the key
  (e.g. `ResultType`), `twice` puts a `"resultType":"complete"` before it.
- `subscriptions/listen` echoes in its acknowledgement the `notifications` it received.
- `tools/call tasknote`: to every listen so far, a tagged `notifications/tasks` for task `t-1`,
  then the sentinel list change; then it answers `noted`.
- `initialize`: -32022 (Modern only); anything else but discovery, `ping` and `tools/list`:
  -32601.
"""
import json
import sys

KEY = "AKIAIOSFODNN7EXAMPLE"
SUB = "io.modelcontextprotocol/subscriptionId"
listens = []


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def notify(method, params):
    send({"jsonrpc": "2.0", "method": method, "params": params})


def answer(rid, result):
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def leak(rid):
    for sub in listens:
        notify("notifications/message", {"_meta": {SUB: sub}, "level": "info",
                                         "logger": "tagger", "data": "key " + KEY})
        notify("notifications/progress", {"_meta": {SUB: sub}, "progressToken": "t",
                                          "progress": 1, "message": "key " + KEY})
        notify("notifications/tools/list_changed", {"_meta": {SUB: sub}})
    answer(rid, {"resultType": "complete", "content": [{"type": "text", "text": "leaked"}]})


def tasknote(rid):
    for sub in listens:
        notify("notifications/tasks", {"_meta": {SUB: sub}, "taskId": "t-1", "status": "working",
                                       "createdAt": "2026-01-01T00:00:00Z",
                                       "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": None})
        notify("notifications/tools/list_changed", {"_meta": {SUB: sub}})
    answer(rid, {"resultType": "complete", "content": [{"type": "text", "text": "noted"}]})


def ask(rid, params):
    got = params.get("inputResponses")
    if got:
        text = "answered " + json.dumps(got)
        return answer(rid, {"resultType": "complete", "content": [{"type": "text", "text": text}]})
    args = params.get("arguments") or {}
    result = json.dumps({args.get("resultTypeKey", "resultType"): "input_required",
                         "inputRequests": {"q": {
                             "method": "elicitation/create", "params": {
                                 "message": "Confirm key " + KEY,
                                 "requestedSchema": {"type": "object", "properties": {}}}}}})
    if args.get("twice"):
        # A repeated key: written by hand, as `json.dumps` never repeats one.
        result = '{"resultType":"complete",' + result[1:]
    sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":%s}\n' % (json.dumps(rid), result))
    sys.stdout.flush()


def handle(msg):
    rid, method = msg.get("id"), msg.get("method")
    params = msg.get("params") or {}
    if rid is None or method is None:
        return
    if method == "server/discover":
        answer(rid, {"resultType": "complete", "supportedVersions": ["2026-07-28"],
                     "capabilities": {"tools": {"listChanged": True}, "logging": {}},
                     "ttlMs": 0, "cacheScope": "public",
                     "_meta": {"io.modelcontextprotocol/serverInfo":
                               {"name": "tagger", "version": "1"}}})
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "error": {
            "code": -32022, "message": "Unsupported protocol version",
            "data": {"supported": ["2026-07-28"], "requested": params.get("protocolVersion")}}})
    elif method == "subscriptions/listen":
        listens.append(rid)
        notify("notifications/subscriptions/acknowledged", {
            "_meta": {SUB: rid}, "notifications": params.get("notifications") or {}})
    elif method == "ping":
        answer(rid, {})
    elif method == "tools/list":
        answer(rid, {"resultType": "complete", "tools": [
            {"name": "leak", "description": "Leaks a key on its callers' listen streams",
             "inputSchema": {"type": "object"}},
            {"name": "ask", "description": "Asks for input with a key in the question",
             "inputSchema": {"type": "object"}},
            {"name": "tasknote", "description": "Sends task status on its callers' listens",
             "inputSchema": {"type": "object"}}]})
    elif method == "tools/call" and params.get("name") == "leak":
        leak(rid)
    elif method == "tools/call" and params.get("name") == "tasknote":
        tasknote(rid)
    elif method == "tools/call" and params.get("name") == "ask":
        ask(rid, params)
    else:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32601, "message": "Method not found"}})


for line in sys.stdin:
    line = line.strip()
    if line:
        handle(json.loads(line))
