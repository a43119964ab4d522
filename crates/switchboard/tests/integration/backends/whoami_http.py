"""A Modern-only (2026-07-28) MCP server over Streamable HTTP, stateless, that tells who
called: its one tool `whoami` answers the `Authorization` header its request carried
(`none` without one). For `forwardCallerToken` tests: what the gateway sent is what the
remote saw. Prints `listening on http://127.0.0.1:PORT/mcp` once it accepts requests.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

META = "io.modelcontextprotocol/serverInfo"


def result(rid, body):
    body["resultType"] = "complete"
    return {"jsonrpc": "2.0", "id": rid, "result": body}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        msg = json.loads(self.rfile.read(length) or b"{}")
        rid, method = msg.get("id"), msg.get("method")
        auth = self.headers.get_all("authorization") or ["none"]
        if rid is None:
            return self.reply(202, None)
        if method == "server/discover":
            out = result(rid, {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                               "_meta": {META: {"name": "whoami", "version": "1"}}})
        elif method == "tools/list":
            out = result(rid, {"tools": [{"name": "whoami", "inputSchema": {"type": "object"}}]})
        elif method == "tools/call":
            out = result(rid, {"content": [{"type": "text", "text": " | ".join(auth)}]})
        else:
            out = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}}
            return self.reply(404, out)
        self.reply(200, out)

    def do_DELETE(self):
        self.reply(405, None)

    def do_GET(self):
        self.reply(405, None)

    def reply(self, status, body):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if body is not None:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening on http://127.0.0.1:%d/mcp" % server.server_address[1], flush=True)
server.serve_forever()
