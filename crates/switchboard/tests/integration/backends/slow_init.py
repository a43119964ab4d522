"""A Legacy stdio backend that never answers a client's `initialize` when the client calls
itself `slow` (per-session mode hands each process its client's own `initialize`): it records
its pid as an empty file named after it in DIR instead, so a test knows which process to watch.
A client that calls itself `crash` makes the process exit at once, unanswered.
Anyone else (the gateway's own handshake) is answered at once.

Usage: slow_init.py DIR
"""
import json
import os
import sys

DIR = sys.argv[1]


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    method, rid = msg["method"], msg["id"]
    params = msg.get("params") or {}
    client = (params.get("clientInfo") or {}).get("name")
    if method == "initialize" and client == "crash":
        sys.exit(3)
    if method == "initialize" and client == "slow":
        open(os.path.join(DIR, str(os.getpid())), "w").close()
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-11-25",
              "capabilities": {}, "serverInfo": {"name": "slow-init", "version": "1"}}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
