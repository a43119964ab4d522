"""A remote MCP server over Streamable HTTP for the `acting` tests (Python stdlib only) that
records the `Authorization` of every request it gets and tells it back: its tool `whoami`
answers the `Authorization` header its request carried (`none` without one); `slow` (Modern
era) answers the same after 5 s.

`--era modern`: 2026-07-28 only, stateless (answers `server/discover`; `initialize` is 404).
`--era legacy`: 2025-11-25 only, with sessions (`initialize` hands out an `Mcp-Session-Id`
every later request must carry; `server/discover` is an error; GET is 405).
`--refuse TOKEN` (repeatable): a request whose `Authorization` is `Bearer TOKEN` gets 401.

`GET /log` answers every request seen, in order: `[{"method", "auth", "session",
"status", "apiKey"}]` (`apiKey`: its `X-Api-Key` header, `none` without one) (`method` is the JSON-RPC method, or the HTTP method for GET/DELETE). Prints
`listening on http://127.0.0.1:PORT/mcp` once bound.
"""
import argparse
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

META = "io.modelcontextprotocol/serverInfo"
args = None
lock = threading.Lock()
log = []
sessions = set()


def record(headers, method, auth, session, status):
    api_key = headers.get("x-api-key", "none")
    with lock:
        log.append({"method": method, "auth": auth, "session": session, "status": status,
                    "apiKey": api_key})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def auth(self):
        values = self.headers.get_all("authorization") or []
        return " | ".join(values) if values else "none"

    def refused(self, auth):
        return any(auth == f"Bearer {t}" for t in args.refuse)

    def do_GET(self):
        if self.path == "/log":
            with lock:
                return self.reply(200, list(log))
        auth = self.auth()
        record(self.headers, "GET", auth, self.headers.get("mcp-session-id"), 405)
        self.reply(405, None)

    def do_DELETE(self):
        auth = self.auth()
        sid = self.headers.get("mcp-session-id")
        with lock:
            sessions.discard(sid)
        record(self.headers, "DELETE", auth, sid, 200)
        self.reply(200, None)

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        msg = json.loads(self.rfile.read(length) or b"{}")
        rid, method = msg.get("id"), msg.get("method")
        auth = self.auth()
        sid = self.headers.get("mcp-session-id")
        if self.refused(auth):
            record(self.headers, method, auth, sid, 401)
            return self.reply(401, None, {"www-authenticate": 'Bearer error="invalid_token"'})
        if args.era == "modern":
            status, out, extra = self.modern(rid, method, auth, msg.get("params") or {})
        else:
            status, out, extra = self.legacy(rid, method, auth, sid)
        record(self.headers, method, auth, sid if args.era == "legacy" else None, status)
        self.reply(status, out, extra)

    def modern(self, rid, method, auth, params):
        def result(body):
            body["resultType"] = "complete"
            return {"jsonrpc": "2.0", "id": rid, "result": body}

        if rid is None:
            return 202, None, {}
        if method == "server/discover":
            return 200, result({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                                "_meta": {META: {"name": "acting-upstream", "version": "1"}}}), {}
        if method == "tools/list":
            return 200, result({"tools": [{"name": "whoami", "inputSchema": {"type": "object"}},
                                          {"name": "slow", "inputSchema": {"type": "object"}}]}), {}
        if method == "tools/call":
            if params.get("name") == "slow":
                time.sleep(5)
            return 200, result({"content": [{"type": "text", "text": auth}]}), {}
        return 404, {"jsonrpc": "2.0", "id": rid,
                     "error": {"code": -32601, "message": "Method not found"}}, {}

    def legacy(self, rid, method, auth, sid):
        def result(body):
            return {"jsonrpc": "2.0", "id": rid, "result": body}

        if method == "initialize":
            new = secrets.token_hex(8)
            with lock:
                sessions.add(new)
            init = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "acting-upstream", "version": "1"}}
            return 200, result(init), {"mcp-session-id": new}
        if method == "server/discover":
            return 400, {"jsonrpc": "2.0", "id": rid,
                         "error": {"code": -32601, "message": "Method not found"}}, {}
        with lock:
            known = sid in sessions
        if not known:
            return 404, None, {}
        if rid is None:
            return 202, None, {}
        if method == "tools/list":
            return 200, result({"tools": [{"name": "whoami", "inputSchema": {"type": "object"}}]}), {}
        if method == "tools/call":
            return 200, result({"content": [{"type": "text", "text": auth}]}), {}
        if method == "ping":
            return 200, result({}), {}
        return 200, {"jsonrpc": "2.0", "id": rid,
                     "error": {"code": -32601, "message": "Method not found"}}, {}

    def reply(self, status, body, extra=None):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if body is not None:
            self.send_header("content-type", "application/json")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--era", choices=["modern", "legacy"], default="modern")
    p.add_argument("--refuse", action="append", default=[])
    args = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening on http://127.0.0.1:%d/mcp" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
