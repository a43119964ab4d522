"""A remote that refuses every request with HTTP 401, as a server wanting another credential
does (for the tests of backends that do not start).

Usage: refusing_http.py  (plain CPython, no packages)

Binds 127.0.0.1 port 0 and prints `listening on PORT` once bound. Every request is answered
401 with a body that quotes the `Authorization` header it got, as careless servers do: a
gateway must never copy such a body into its logs, audit lines or errors.
"""
import http.server
import sys


class Refuse(http.server.BaseHTTPRequestHandler):
    def refuse(self):
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        body = ("denied auth=%s" % self.headers.get("authorization", "")).encode()
        self.send_response(401)
        self.send_header("content-type", "text/plain")
        self.send_header("www-authenticate", 'Bearer realm="test"')
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = refuse

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
print("listening on %d" % server.server_address[1], flush=True)
sys.stdout.close()
server.serve_forever()
