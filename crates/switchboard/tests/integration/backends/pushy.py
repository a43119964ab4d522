"""A scriptable stdio MCP backend for gateway routing tests.

Tools:
- `emit {lines: [json...], delayMs?}`: writes each given JSON message to stdout (verbatim, as
  the backend's own unsolicited traffic), then answers `emitted`. Lets a test make the backend
  send anything: forged progress tokens, list_changed with smuggled params, and so on.
- `flood_progress {count, bytes}`: sends `count` progress notifications for this request's own
  (gateway-minted) token, each carrying a `message` of `bytes` characters, then answers
  `flooded`. Lets a test put large notifications on a request's stream.
- `hold {}`: never answers (until cancelled, which is recorded).
- `release {}`: answers every held request (`released`), then itself (`released N`). Lets a
  test make answers arrive at a moment it chooses, e.g. after their client has gone.
- `stats {}`: what the backend saw: subscribe/unsubscribe calls per URI in order, the current
  set of subscribed URIs, setLevel calls, received cancellations, and ids of held requests.

`resources/unsubscribe` answers after 50 ms so concurrent operations on one URI overlap.
With `--task-page-1`, `tasks/list` pages one task at a time (`nextCursor` is the next index).
"""
import json
import sys
import threading
import time

lock = threading.RLock()
state = {"subscribe": [], "unsubscribe": [], "subscribed": [], "setLevel": [], "cancelled": [], "held": []}


def send(msg):
    with lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def result(req, res):
    send({"jsonrpc": "2.0", "id": req["id"], "result": res})


def text(req, t):
    result(req, {"content": [{"type": "text", "text": t}]})


def handle(req):
    method = req.get("method")
    params = req.get("params") or {}
    if method == "initialize":
        result(req, {"protocolVersion": "2025-11-25",
                     "capabilities": {"tools": {"listChanged": True}, "logging": {},
                                      "resources": {"subscribe": True, "listChanged": True}},
                     "serverInfo": {"name": "pushy", "version": "1"}})
    elif method == "resources/subscribe":
        with lock:
            state["subscribe"].append(params.get("uri"))
            state["subscribed"].append(params.get("uri"))
        if params.get("uri") == "fail://me":
            send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32602, "message": "no such resource"}})
            with lock:
                state["subscribed"].remove("fail://me")
            return
        result(req, {})
    elif method == "resources/unsubscribe":
        time.sleep(0.05)
        with lock:
            state["unsubscribe"].append(params.get("uri"))
            if params.get("uri") in state["subscribed"]:
                state["subscribed"].remove(params.get("uri"))
        result(req, {})
    elif method == "logging/setLevel":
        with lock:
            state["setLevel"].append(params.get("level"))
        result(req, {})
    elif method.startswith("tasks/"):
        handle_task(req, method, params)
    elif method == "tools/call" and "task" in params:
        # Task-augmented call: answered at once with a task handle.
        with lock:
            state["tasks"] = state.get("tasks", 0) + 1
            tid = "task-%d" % state["tasks"]
            tasks[tid] = {"taskId": tid, "status": "working", "createdAt": "2026-01-01T00:00:00Z",
                          "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": None}
        result(req, {"task": tasks[tid]})
    elif method == "tools/call":
        name = params.get("name")
        args = params.get("arguments") or {}
        if name == "emit":
            time.sleep(args.get("delayMs", 0) / 1000)
            for line in args.get("lines", []):
                send(line)
            text(req, "emitted")
        elif name == "flood_progress":
            token = (params.get("_meta") or {}).get("progressToken")
            pad = "p" * args.get("bytes", 0)
            for i in range(args.get("count", 0)):
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": i + 1, "message": pad}})
            text(req, "flooded")
        elif name == "hold":
            with lock:
                state["held"].append(req["id"])
        elif name == "release":
            with lock:
                held, state["held"] = state["held"], []
            for key in held:
                text({"id": key}, "released")
            text(req, "released %d" % len(held))
        elif name == "stats":
            with lock:
                text(req, json.dumps(state))
        elif name == "token":
            # Reports the progress token the backend saw for this very request.
            text(req, json.dumps((params.get("_meta") or {}).get("progressToken")))
        else:
            send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32602, "message": "unknown tool"}})
    else:
        send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "nope"}})


tasks = {}


def handle_task(req, method, params):
    if method == "tasks/list":
        listed = list(tasks.values())
        if "--task-page-1" in sys.argv:
            at = int(params.get("cursor") or 0)
            page = {"tasks": listed[at:at + 1]}
            if at + 1 < len(listed):
                page["nextCursor"] = str(at + 1)
            result(req, page)
            return
        result(req, {"tasks": listed})
        return
    task = tasks.get(params.get("taskId"))
    if task is None:
        send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32602, "message": "no such task"}})
    elif method == "tasks/result":
        text(req, "result of " + task["taskId"])
    elif method == "tasks/cancel":
        task["status"] = "cancelled"
        result(req, task)
    else:
        result(req, task)


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        if msg.get("method") == "notifications/cancelled":
            with lock:
                state["cancelled"].append(msg.get("params", {}).get("requestId"))
        continue
    if "method" not in msg:
        continue
    threading.Thread(target=handle, args=(msg,), daemon=True).start()
