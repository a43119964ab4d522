"""A Modern-only (2026-07-28) stdio backend with Tasks-extension handles, for ownership tests.

Every `tools/call` is answered with a task handle (`resultType: "task"`) whether or not the
client asked for one, as the Tasks extension lets a server do. `tasks/get` reports a task,
`tasks/cancel` marks it cancelled; an unknown task id gets -32602. `initialize` is refused, so
the gateway serves this backend as Modern-only (Modern requests pass through).
"""
import json
import sys

tasks = {}


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def result(rid, res):
    res.setdefault("resultType", "complete")
    send({"jsonrpc": "2.0", "id": rid, "result": res})


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    method, rid = msg["method"], msg["id"]
    params = msg.get("params") or {}
    if method == "server/discover":
        result(rid, {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                     "ttlMs": 0, "cacheScope": "public",
                     "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "tasky", "version": "1"}}})
    elif method == "tools/list":
        result(rid, {"tools": [{"name": "work", "inputSchema": {"type": "object"}}],
                     "ttlMs": 0, "cacheScope": "public"})
    elif method == "tools/call":
        tid = "tasky-%d" % (len(tasks) + 1)
        tasks[tid] = {"taskId": tid, "status": "working", "createdAt": "2026-01-01T00:00:00Z",
                      "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": None}
        result(rid, dict(tasks[tid], resultType="task"))
    elif method in ("tasks/get", "tasks/cancel") and params.get("taskId") in tasks:
        task = tasks[params["taskId"]]
        if method == "tasks/cancel":
            task["status"] = "cancelled"
        result(rid, dict(task))
    elif method.startswith("tasks/"):
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no such task"}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
