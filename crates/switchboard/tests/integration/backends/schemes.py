"""A Legacy stdio backend serving resources under a scheme of its own, read as RFC 3986 says
(the scheme case-insensitively, the rest exactly): scheme-case tests of the gateway's routing.

Usage: schemes.py SCHEME

- `resources/list`: `SCHEME://info` and `SCHEME://secret`;
  `resources/templates/list`: `SCHEME://items/{id}`.
- `resources/read URI`: text `SCHEME read URI` when URI, its scheme lower-cased, is one of
  those (or matches the template); else -32002.
- Anything else but the handshake and `ping` is -32601.
"""
import json
import sys

SCHEME = sys.argv[1]
LISTED = [SCHEME + "://info", SCHEME + "://secret"]
ITEMS = SCHEME + "://items/"


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def canonical(uri):
    scheme, sep, rest = uri.partition("://")
    return scheme.lower() + sep + rest if sep else uri


def served(uri):
    c = canonical(uri)
    if c in LISTED:
        return True
    item = c[len(ITEMS):] if c.startswith(ITEMS) else ""
    return item != "" and "/" not in item


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    rid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if rid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-11-25"),
                  "capabilities": {"resources": {}},
                  "serverInfo": {"name": "schemes-" + SCHEME, "version": "1"}}
    elif method == "ping":
        result = {}
    elif method == "resources/list":
        result = {"resources": [{"uri": u, "name": u.split("://")[1]} for u in LISTED]}
    elif method == "resources/templates/list":
        result = {"resourceTemplates": [{"uriTemplate": ITEMS + "{id}", "name": "items"}]}
    elif method == "resources/read" and served(params.get("uri", "")):
        uri = params["uri"]
        result = {"contents": [{"uri": uri, "mimeType": "text/plain",
                                "text": "%s read %s" % (SCHEME, uri)}]}
    elif method == "resources/read":
        error = {"code": -32002, "message": "Resource not found",
                 "data": {"uri": params.get("uri")}}
        send({"jsonrpc": "2.0", "id": rid, "error": error})
        continue
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not found"}})
        continue
    send({"jsonrpc": "2.0", "id": rid, "result": result})
