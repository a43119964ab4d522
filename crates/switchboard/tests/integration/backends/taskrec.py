"""A Legacy (2025-11-25) stdio backend with task-augmented tools that records what it receives.

Usage: `taskrec.py TAG`. Tools:
- `work_TAG {}`: task-augmented (`execution.taskSupport: "optional"`); with `task` in the
  params it answers a `CreateTaskResult` whose task id is `t-N`, N counting from 1 in every
  instance, so two instances hand out the same ids (as unrelated servers would).
- `seen_TAG {}`: what this backend received, as JSON text: every `tasks/*` request as
  `[method, taskId]` in arrival order.
`tasks/get`, `tasks/cancel`, `tasks/result` and `tasks/list` serve the tasks; an unknown task id
gets -32602. Every answer naming a task also says which backend it is (`statusMessage`).
"""
import json
import sys

TAG = sys.argv[1]
tasks = {}
seen = []


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def result(rid, res):
    send({"jsonrpc": "2.0", "id": rid, "result": res})


def text(rid, t, meta=None):
    res = {"content": [{"type": "text", "text": t}]}
    if meta:
        res["_meta"] = meta
    result(rid, res)


TOOLS = [
    {"name": "work_" + TAG, "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}},
    {"name": "seen_" + TAG, "inputSchema": {"type": "object"}},
]

for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    method, rid = msg["method"], msg["id"]
    params = msg.get("params") or {}
    if method == "initialize":
        result(rid, {"protocolVersion": "2025-11-25",
                     "capabilities": {"tools": {}, "tasks": {"list": {}, "cancel": {},
                                                            "requests": {"tools": {"call": {}}}}},
                     "serverInfo": {"name": "taskrec-" + TAG, "version": "1"}})
    elif method == "tools/list":
        result(rid, {"tools": TOOLS})
    elif method == "tools/call" and params.get("name") == "seen_" + TAG:
        text(rid, json.dumps(seen))
    elif method == "tools/call" and params.get("name") == "work_" + TAG and "task" in params:
        tid = "t-%d" % (len(tasks) + 1)
        tasks[tid] = {"taskId": tid, "status": "working", "statusMessage": TAG,
                      "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
                      "ttl": 60000}
        result(rid, {"task": tasks[tid]})
    elif method == "tools/call" and params.get("name") == "work_" + TAG:
        text(rid, "done at " + TAG)
    elif method.startswith("tasks/"):
        tid = params.get("taskId")
        seen.append([method, tid])
        task = tasks.get(tid)
        if method == "tasks/list":
            result(rid, {"tasks": list(tasks.values())})
        elif task is None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no such task"}})
        elif method == "tasks/result":
            text(rid, "result of %s at %s" % (tid, TAG),
                 {"io.modelcontextprotocol/related-task": {"taskId": tid}})
        elif method == "tasks/cancel":
            task["status"] = "cancelled"
            result(rid, task)
        else:
            result(rid, task)
    elif method == "ping":
        result(rid, {})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no " + method}})
