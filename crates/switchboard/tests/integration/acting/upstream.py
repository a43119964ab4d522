"""A remote MCP server over Streamable HTTP for the `acting` tests (Python stdlib only) that
records the `Authorization` of every request it gets and tells it back: its tool `whoami`
answers the `Authorization` header its request carried (`none` without one); `slow` (Modern
era) answers the same after 5 s.

`--era modern`: 2026-07-28 only, stateless (answers `server/discover`; `initialize` is 404).
`--era legacy`: 2025-11-25 only, with sessions (`initialize` hands out an `Mcp-Session-Id`
every later request must carry; `server/discover` is an error; GET is 405).
`--refuse TOKEN` (repeatable): a request whose `Authorization` is `Bearer TOKEN` gets 401.

`--oauth`: the server is also its own OAuth authorization server (same origin), and
`/mcp` takes only tokens it issued: without one, 401 with `WWW-Authenticate: Bearer
resource_metadata=".../.well-known/oauth-protected-resource/mcp"`. It publishes RFC 9728 and
RFC 8414 metadata (PKCE S256, `iss` in answers, `client_secret_basic`, dynamic registration),
registers clients (`POST /register`), and its `GET /authorize` approves at once as the user
the test's scripted browser names in `test_user`, redirecting with `code`, `state` and `iss`.
`POST /token` checks the client's Basic credentials, the PKCE verifier, that `resource` is this
server's and the same as at authorization, then issues `at.<user>.<n>` (lifetime
`--lifetime`, default 3600 s) and a refresh token `rt.<user>.<n>` (rotated on use). `GET
/as-log` answers what the authorization server did: `[{"kind", "user", "grant",
"resource"}]`; `GET /as-secrets` every secret it minted or was sent (codes, states, access
and refresh tokens, client secrets, PKCE verifiers), for leak checks. `GET /as-hold` makes
every token request wait (logged first) until `GET /as-release`; `GET /as-fail?n=N` answers
the next N token requests 503 `temporarily_unavailable`.
`--public-lists` (with `--oauth`): `server/discover` and `tools/list` need no token (as a
server whose catalogue is public), so an aggregating gateway lists its tools; `tools/call`
still does.
`--authorization-server URL`: the protected-resource metadata names that authorization server
instead of this one (a server pointing the gateway elsewhere). `--client ID:SECRET`: a client
registered in advance. Every `POST /token` is recorded first as `{"kind": "token-request",
"basic": <whether it carried Basic credentials>}`, whether or not it is then refused.

`--oidc-issuer URL`: the server is protected (as with `--oauth`) by another, real
authorization server (the tests' oidc-provider): its protected-resource metadata names that
issuer (and `scopes_supported: ["tools"]`), and `/mcp` takes only JWT access tokens (RFC 9068)
that issuer signed RS256 with a key of its JWKS (found through its OpenID discovery document),
not expired, whose `aud` is this server's `/mcp` URL; anything else gets 401 with the
`resource_metadata` challenge. Refusals are recorded in `GET /refused`: `[reason]`.

`GET /log` answers every request seen, in order: `[{"method", "auth", "session",
"status", "apiKey"}]` (`apiKey`: its `X-Api-Key` header, `none` without one) (`method` is the JSON-RPC method, or the HTTP method for GET/DELETE). Prints
`listening on http://127.0.0.1:PORT/mcp` once bound.
"""
import argparse
import base64
import hashlib
import json
import secrets
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

META = "io.modelcontextprotocol/serverInfo"
args = None
lock = threading.Lock()
log = []
sessions = set()
as_log = []
clients = {}  # client_id -> secret
codes = {}  # code -> {user, challenge, resource, client_id, redirect_uri}
tokens = {}  # access token -> (user, expires)
refresh = {}  # refresh token -> (user, resource, client_id)
counter = {"n": 0}
released = threading.Event()  # cleared by /as-hold: token requests wait for /as-release
released.set()
failing = {"n": 0}  # /as-fail?n=N: the next N token requests get 503 temporarily_unavailable
issued = []  # every secret this server minted or was sent: codes, tokens, client secrets, verifiers


jwks_cache = {}  # kid -> jwk of the --oidc-issuer
refusals = []  # why a token was refused (--oidc-issuer)


def issuer_keys(refetch):
    """The --oidc-issuer's signing keys by kid, from its discovery document's jwks_uri."""
    with lock:
        if jwks_cache and not refetch:
            return dict(jwks_cache)
    discovery = args.oidc_issuer + "/.well-known/openid-configuration"
    with urllib.request.urlopen(discovery, timeout=5) as r:
        jwks_uri = json.load(r)["jwks_uri"]
    with urllib.request.urlopen(jwks_uri, timeout=5) as r:
        keys = {k.get("kid"): k for k in json.load(r)["keys"] if k.get("kty") == "RSA"}
    with lock:
        jwks_cache.clear()
        jwks_cache.update(keys)
    return keys


def oidc_refusal(token, resource):
    """Why `token` is not a live access token of the --oidc-issuer for `resource` (None: it is)."""
    from test_sts import verify_rs256, b64url  # same directory, stdlib only
    try:
        kid = json.loads(b64url(token.split(".")[0])).get("kid")
    except Exception:
        return "not a JWT"
    keys = issuer_keys(False)
    if kid not in keys:
        keys = issuer_keys(True)
    if kid not in keys:
        return "unknown key"
    claims = verify_rs256(token, keys[kid])
    if claims is None:
        return "bad signature"
    aud = claims.get("aud")
    auds = aud if isinstance(aud, list) else [aud]
    if claims.get("iss") != args.oidc_issuer:
        return "another issuer"
    if resource not in auds:
        return "another audience"
    if not isinstance(claims.get("exp"), (int, float)) or claims["exp"] <= time.time():
        return "expired"
    return None


def mint(prefix, user):
    with lock:
        counter["n"] += 1
        return f"{prefix}.{user}.{counter['n']}"


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

    def base(self):
        return "http://" + self.headers.get("host")

    def oidc_get(self):
        """With --oidc-issuer: the resource's metadata and `/refused`; True when answered."""
        if self.path == "/.well-known/oauth-protected-resource/mcp":
            self.reply(200, {"resource": self.base() + "/mcp",
                             "authorization_servers": [args.oidc_issuer],
                             "scopes_supported": ["tools"]})
        elif self.path == "/refused":
            with lock:
                self.reply(200, list(refusals))
        else:
            return False
        return True

    def oauth_get(self):
        """The authorization server's and the resource's GET routes; True when answered."""
        path, _, query = self.path.partition("?")
        base = self.base()
        if path == "/.well-known/oauth-protected-resource/mcp":
            self.reply(200, {"resource": base + "/mcp",
                             "authorization_servers": [args.authorization_server or base]})
        elif path == "/.well-known/oauth-authorization-server":
            self.reply(200, {
                "issuer": base, "authorization_endpoint": base + "/authorize",
                "token_endpoint": base + "/token", "registration_endpoint": base + "/register",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "authorization_response_iss_parameter_supported": True})
        elif path == "/as-log":
            with lock:
                self.reply(200, list(as_log))
        elif path == "/as-secrets":
            with lock:
                self.reply(200, [s for s in issued if s])
        elif path == "/as-hold":
            released.clear()
            self.reply(200, {})
        elif path == "/as-release":
            released.set()
            self.reply(200, {})
        elif path == "/as-fail":
            with lock:
                failing["n"] = int(dict(urllib.parse.parse_qsl(query)).get("n", "1"))
            self.reply(200, {})
        elif path == "/authorize":
            q = dict(urllib.parse.parse_qsl(query))
            user = q.get("test_user", "nobody")
            code = mint("code", user)
            with lock:
                issued.extend([code, q.get("state", "")])
                codes[code] = {"user": user, "challenge": q.get("code_challenge"),
                               "resource": q.get("resource"), "client_id": q.get("client_id"),
                               "redirect_uri": q.get("redirect_uri")}
                as_log.append({"kind": "authorize", "user": user, "resource": q.get("resource"),
                               "method": q.get("code_challenge_method")})
            target = q["redirect_uri"] + "?" + urllib.parse.urlencode(
                {"code": code, "state": q.get("state", ""), "iss": base})
            self.send_response(302)
            self.send_header("location", target)
            self.send_header("content-length", "0")
            self.end_headers()
        else:
            return False
        return True

    def oauth_post(self, raw):
        """`/register` and `/token`; True when answered."""
        if self.path == "/register":
            cid = "client-" + secrets.token_hex(4)
            with lock:
                clients[cid] = secrets.token_hex(16)
                issued.append(clients[cid])
                body = json.loads(raw or b"{}")
                as_log.append({"kind": "register", "redirect_uris": body.get("redirect_uris")})
            body.update({"client_id": cid, "client_secret": clients[cid],
                         "token_endpoint_auth_method": "client_secret_basic"})
            self.reply(201, body)
            return True
        if self.path != "/token":
            return False
        form = dict(urllib.parse.parse_qsl(raw.decode()))
        basic = self.headers.get("authorization", "")
        with lock:
            as_log.append({"kind": "token-request", "basic": basic.startswith("Basic ")})
        released.wait(30)
        with lock:
            fail = failing["n"] > 0
            failing["n"] -= 1 if fail else 0
        if fail:
            self.reply(503, {"error": "temporarily_unavailable"})
            return True
        try:
            cid, _, secret = base64.b64decode(basic.removeprefix("Basic ")).decode().partition(":")
            cid, secret = urllib.parse.unquote_plus(cid), urllib.parse.unquote_plus(secret)
        except Exception:
            cid, secret = "", ""
        if not basic.startswith("Basic ") or clients.get(cid) != secret:
            self.reply(401, {"error": "invalid_client"})
            return True
        resource = form.get("resource")
        if form.get("grant_type") == "authorization_code":
            with lock:
                grant = codes.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "")
            with lock:
                issued.append(verifier)
            challenge = base64.urlsafe_b64encode(
                hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
            if (grant is None or grant["challenge"] != challenge or grant["client_id"] != cid
                    or grant["resource"] != resource or resource != self.base() + "/mcp"
                    or grant["redirect_uri"] != form.get("redirect_uri")):
                self.reply(400, {"error": "invalid_grant"})
                return True
            user = grant["user"]
        elif form.get("grant_type") == "refresh_token":
            with lock:
                old = refresh.pop(form.get("refresh_token", ""), None)
            if old is None or old[1] != resource or old[2] != cid:
                self.reply(400, {"error": "invalid_grant"})
                return True
            user = old[0]
        else:
            self.reply(400, {"error": "unsupported_grant_type"})
            return True
        access, rt = mint("at", user), mint("rt", user)
        with lock:
            tokens[access] = (user, time.time() + args.lifetime)
            refresh[rt] = (user, resource, cid)
            issued.extend([access, rt])
            as_log.append({"kind": "token", "grant": form["grant_type"], "user": user,
                           "resource": resource})
        self.reply(200, {"access_token": access, "token_type": "Bearer",
                         "expires_in": args.lifetime, "refresh_token": rt})
        return True

    def unauthorized(self, auth):
        """With --oauth: whether `auth` is not a live token this server issued (with
        --oidc-issuer: one that issuer issued for this server)."""
        token = auth.removeprefix("Bearer ")
        if args.oidc_issuer:
            if not auth.startswith("Bearer "):
                return True
            reason = oidc_refusal(token, self.base() + "/mcp")
            if reason:
                with lock:
                    refusals.append(reason)
            return reason is not None
        with lock:
            held = tokens.get(token)
        return held is None or held[1] < time.time()

    def do_GET(self):
        if args.oidc_issuer and self.oidc_get():
            return
        if args.oauth and self.oauth_get():
            return
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
        raw = self.rfile.read(length)
        if args.oauth and self.oauth_post(raw):
            return
        msg = json.loads(raw or b"{}")
        rid, method = msg.get("id"), msg.get("method")
        auth = self.auth()
        sid = self.headers.get("mcp-session-id")
        public = args.public_lists and method in ("server/discover", "tools/list")
        protected = args.oauth or args.oidc_issuer
        if protected and not public and self.unauthorized(auth):
            record(self.headers, method, auth, sid, 401)
            challenge = ('Bearer error="invalid_token", resource_metadata="%s'
                         '/.well-known/oauth-protected-resource/mcp"' % self.base())
            return self.reply(401, {"error": "invalid_token"}, {"www-authenticate": challenge})
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
    p.add_argument("--oauth", action="store_true")
    p.add_argument("--lifetime", type=int, default=3600)
    p.add_argument("--public-lists", action="store_true")
    p.add_argument("--authorization-server")
    p.add_argument("--client", action="append", default=[])
    p.add_argument("--oidc-issuer")
    args = p.parse_args()
    for c in args.client:
        cid, _, secret = c.partition(":")
        clients[cid] = secret
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening on http://127.0.0.1:%d/mcp" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
