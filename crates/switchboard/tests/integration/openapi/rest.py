"""A small REST API for the OpenAPI backend tests (Python 3 stdlib only).

Prints `listening <port>` once bound to 127.0.0.1 (port 0 by default). Records every request
under /v1 (method, raw path, raw query, headers, body) in order; `GET /__log` answers the
records so far as a JSON array (and is not recorded itself).
  GET    /v1/pets            -> 200 [{"name": "rex", "tag": null}]
  POST   /v1/pets            -> 201 the JSON body back
  GET    /v1/pets/missing    -> 404 {"error": "no such pet"}
  GET    /v1/pets/<id>       -> 200 {"name": <id, percent-decoded>, "tag": "t"}
  DELETE /v1/pets/<id>       -> 204
  GET    /v1/big             -> 200, a JSON body of argv[1] MiB (default 50)
  GET    /v1/ctl             -> 200, text/plain: 1 MiB less one byte of \\x01
  GET    /v1/redirect        -> 302 to argv[2] (the test's decoy)
  GET    /v1/echo            -> 200 the request's headers as JSON, each / escaped
  GET    /hostile/<kind>     -> 200 a hostile spec: aliases (YAML aliases of aliases), refs
                                (1000 operations of 14k-node schemas), names (20000
                                operations of one name)
  GET    /v1/echo/fail       -> 500 an HTML page quoting the request's headers
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

LOG = []
LOCK = threading.Lock()
BIG_MIB = int(sys.argv[1]) if len(sys.argv) > 1 else 50
DECOY = sys.argv[2] if len(sys.argv) > 2 else "http://127.0.0.1:1/"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_raw(self, status, content_type, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        if path == "/__log":
            with LOCK:
                return self.send_json(200, LOG)
        record = {
            "method": self.command,
            "path": path,
            "query": query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
        }
        with LOCK:
            LOG.append(record)
        self.route(self.command, path, body)

    def route(self, method, path, body):
        if path.startswith("/hostile/"):
            return self.send_raw(200, "application/yaml", hostile(path[len("/hostile/"):]))
        if method == "GET" and path == "/v1/pets":
            return self.send_json(200, [{"name": "rex", "tag": None}])
        if method == "POST" and path == "/v1/pets":
            return self.send_json(201, json.loads(body or "null"))
        if path.startswith("/v1/pets/"):
            pet = unquote(path[len("/v1/pets/"):])
            if method == "DELETE":
                self.send_response(204)
                self.send_header("Content-Length", "0")
                return self.end_headers()
            if pet == "missing":
                return self.send_json(404, {"error": "no such pet"})
            return self.send_json(200, {"name": pet, "tag": "t"})
        if path == "/v1/big":
            return self.send_big()
        if path == "/v1/ctl":
            return self.send_raw(200, "text/plain", "\x01" * (1024 * 1024 - 1))
        if path == "/v1/echo":
            headers = {k.lower(): v for k, v in self.headers.items()}
            return self.send_raw(200, "application/json", json.dumps(headers).replace("/", "\\/"))
        if path == "/v1/echo/fail":
            page = "<pre>" + "\n".join(f"{k}: {v}" for k, v in self.headers.items()) + "</pre>"
            return self.send_raw(500, "text/html", page)
        if path == "/v1/redirect":
            self.send_response(302)
            self.send_header("Location", DECOY)
            self.send_header("Content-Length", "0")
            return self.end_headers()
        return self.send_json(404, {"error": "no route"})

    def send_big(self):
        chunk = b" " * (1024 * 1024)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(BIG_MIB * len(chunk) + 2))
        self.end_headers()
        try:
            self.wfile.write(b"{}")
            for _ in range(BIG_MIB):
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_any


def hostile(kind):
    if kind == "aliases":
        items = ",".join(["x"] * 20000)
        refs = ",".join(["*a"] * 20000)
        return f"openapi: 3.0.3\npaths: {{}}\na: &a [{items}]\nb: [{refs}]\n"
    ok = {"200": {"description": "ok"}}
    if kind == "refs":
        depth = 11
        schemas = {f"S{i}": {"type": "object", "properties": {
            "a": {"$ref": f"#/components/schemas/S{i + 1}"},
            "b": {"$ref": f"#/components/schemas/S{i + 1}"}}} for i in range(depth)}
        schemas[f"S{depth}"] = {"type": "string"}
        s0 = {"$ref": "#/components/schemas/S0"}
        paths = {f"/p{i}": {"post": {
            "parameters": [{"name": "q", "in": "query", "schema": s0}],
            "requestBody": {"content": {"application/json": {"schema": s0}}},
            "responses": {"200": {"description": "ok",
                                  "content": {"application/json": {"schema": s0}}}}}}
                 for i in range(1000)}
        return json.dumps({"openapi": "3.1.0", "paths": paths,
                           "components": {"schemas": schemas}})
    paths = {f"/p{i}": {"get": {"operationId": "same", "responses": ok}} for i in range(20000)}
    return json.dumps({"openapi": "3.1.0", "paths": paths})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
