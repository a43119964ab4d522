"""A Modern-only (2026-07-28) stdio backend whose task polls a test holds open, for watched
listens: after each `subscriptions/listen`, the first `tasks/get` (the gateway agreeing on the
listen's watch) is answered at once; every later one is held, unanswered, until `release`.

- `tools/call work {}`: a task (`w-1`, `w-2`, ...), `working`, answered `resultType: "task"`.
- `subscriptions/listen`: acknowledged (tagged with the request's id), never answered.
- `tools/call burst {count, sentinel?}`: once a `tasks/get` is held (at once when one is, else
  as soon as one arrives), `count` tagged `notifications/message` to every listen, their `data`
  numbering them from 0 across bursts, then (with `sentinel`) a tagged
  `notifications/tools/list_changed`; then it answers `sent`. So all of it is sent while a poll
  is held.
- `tools/call release {}`: every task is `completed` and the held `tasks/get` are answered;
  from then on every `tasks/get` is answered at once.
- `initialize`: -32022 (Modern only); anything else but discovery and `tools/list`: -32601.
"""
import json
import sys

SUB = "io.modelcontextprotocol/subscriptionId"
tasks = {}
listens = []
held = []
deferred = []
state = {"gets": 0, "released": False, "sent": 0}


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def notify(method, params):
    send({"jsonrpc": "2.0", "method": method, "params": params})


def answer(rid, result):
    result.setdefault("resultType", "complete")
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def text(rid, t):
    answer(rid, {"content": [{"type": "text", "text": t}]})


def burst(rid, args):
    for _ in range(int(args.get("count", 0))):
        for sub in listens:
            notify("notifications/message", {"_meta": {SUB: sub}, "level": "info",
                                             "logger": "held_poll", "data": state["sent"]})
        state["sent"] += 1
    if args.get("sentinel"):
        for sub in listens:
            notify("notifications/tools/list_changed", {"_meta": {SUB: sub}})
    text(rid, "sent")


def get(rid, params):
    task = tasks.get(params.get("taskId"))
    if task is None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no such task"}})
        return
    state["gets"] += 1
    if state["gets"] == 1 or state["released"]:
        answer(rid, dict(task))
        return
    held.append((rid, params["taskId"]))
    while deferred:
        burst(*deferred.pop(0))


def release(rid):
    state["released"] = True
    for task in tasks.values():
        task["status"] = "completed"
        task["result"] = {"content": [{"type": "text", "text": "done"}]}
    while held:
        rid_held, tid = held.pop(0)
        answer(rid_held, dict(tasks[tid]))
    text(rid, "released")


def call(rid, params):
    name, args = params.get("name"), params.get("arguments") or {}
    if name == "work":
        tid = "w-%d" % (len(tasks) + 1)
        tasks[tid] = {"taskId": tid, "status": "working", "createdAt": "2026-01-01T00:00:00Z",
                      "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 600000,
                      "pollIntervalMs": 1000}
        answer(rid, dict(tasks[tid], resultType="task"))
    elif name == "burst" and held:
        burst(rid, args)
    elif name == "burst":
        deferred.append((rid, args))
    elif name == "release":
        release(rid)
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no such tool"}})


def handle(msg):
    rid, method = msg.get("id"), msg.get("method")
    params = msg.get("params") or {}
    if rid is None or method is None:
        return
    if method == "server/discover":
        answer(rid, {"supportedVersions": ["2026-07-28"],
                     "capabilities": {"tools": {"listChanged": True}, "logging": {}},
                     "ttlMs": 0, "cacheScope": "public",
                     "_meta": {"io.modelcontextprotocol/serverInfo":
                               {"name": "held_poll", "version": "1"}}})
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "error": {
            "code": -32022, "message": "Unsupported protocol version",
            "data": {"supported": ["2026-07-28"], "requested": params.get("protocolVersion")}}})
    elif method == "subscriptions/listen":
        listens.append(rid)
        state["gets"] = 0
        notify("notifications/subscriptions/acknowledged", {
            "_meta": {SUB: rid}, "notifications": params.get("notifications") or {}})
    elif method == "tools/list":
        answer(rid, {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                               for n in ("work", "burst", "release")],
                     "ttlMs": 0, "cacheScope": "public"})
    elif method == "tools/call":
        call(rid, params)
    elif method == "tasks/get":
        get(rid, params)
    else:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32601, "message": "Method not found"}})


for line in sys.stdin:
    line = line.strip()
    if line:
        handle(json.loads(line))
