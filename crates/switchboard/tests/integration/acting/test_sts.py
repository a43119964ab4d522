"""A small OAuth token service for the `acting` tests (Python stdlib only): RFC 8693 token
exchange and the client credentials grant at `POST /token`, with `client_secret_basic`.

A token exchange's subject token must be a JWT of the test's incoming-auth issuer, signed
RS256 by the key in `--jwk` (checked here with plain modular arithmetic: PKCS#1 v1.5 over
SHA-256), not expired, for `--subject-audience`. The token issued names its subject, the
audience asked for and a per-subject counter: `xt.<sub>.<audience>.<n>`, so a test can tell
exactly whose token reached an upstream, and how many exchanges there were. A subject in
`--refuse-subject` gets an RFC 6749 error whose description carelessly quotes the client
secret and the subject token (a gateway must pass on only the `error` code).

Client credentials issue `cc.<client_id>.<n>`.

`GET /stats` answers what was done: `{"exchanges": {sub: n}, "clientCredentials": n,
"refused": [reason, ...]}`. Prints `listening on http://127.0.0.1:PORT/token` once bound.
"""
import argparse
import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
# DER prefix of a PKCS#1 v1.5 DigestInfo for SHA-256 (RFC 8017 §9.2, note 1).
SHA256_INFO = bytes.fromhex("3031300d060960864801650304020105000420")

args = None
lock = threading.Lock()
stats = {"exchanges": {}, "clientCredentials": 0, "refused": []}


def b64url(data):
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


def verify_rs256(token, jwk):
    """The JWT's claims if its RS256 signature verifies under `jwk`, else None."""
    try:
        head, body, sig = token.split(".")
        header = json.loads(b64url(head))
        if header.get("alg") != "RS256":
            return None
        n = int.from_bytes(b64url(jwk["n"]), "big")
        e = int.from_bytes(b64url(jwk["e"]), "big")
        k = (n.bit_length() + 7) // 8
        s = int.from_bytes(b64url(sig), "big")
        if s >= n:
            return None
        em = pow(s, e, n).to_bytes(k, "big")
        digest = hashlib.sha256(f"{head}.{body}".encode()).digest()
        t = SHA256_INFO + digest
        expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
        if not hmac.compare_digest(em, expected):
            return None
        return json.loads(b64url(body))
    except Exception:
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/stats":
            with lock:
                return self.reply(200, stats)
        self.reply(404, {"error": "not_found"})

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length).decode()
        if self.path != "/token":
            return self.reply(404, {"error": "not_found"})
        if self.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return self.refuse(400, "invalid_request", "content type")
        form = urllib.parse.parse_qs(raw, keep_blank_values=True)
        if any(len(v) != 1 for v in form.values()):
            return self.refuse(400, "invalid_request", "repeated parameter")
        form = {k: v[0] for k, v in form.items()}
        if "client_secret" in form or "client_id" in form:
            return self.refuse(400, "invalid_request", "client credentials in the body")
        if not self.client_ok():
            return self.refuse(401, "invalid_client", "client authentication")
        grant = form.get("grant_type")
        if grant == TOKEN_EXCHANGE:
            return self.exchange(form)
        if grant == "client_credentials":
            if "subject_token" in form:
                return self.refuse(400, "invalid_request", "subject in client credentials")
            with lock:
                stats["clientCredentials"] += 1
                n = stats["clientCredentials"]
            return self.issue(f"cc.{args.client_id}.{n}", exchange=False)
        self.refuse(400, "unsupported_grant_type", "grant")

    def client_ok(self):
        auth = self.headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            pair = base64.b64decode(value, validate=True).decode()
        except Exception:
            return False
        cid, sep, secret = pair.partition(":")
        if not sep:
            return False
        cid = urllib.parse.unquote_plus(cid)
        secret = urllib.parse.unquote_plus(secret)
        return hmac.compare_digest(cid, args.client_id) and hmac.compare_digest(
            secret, args.client_secret
        )

    def exchange(self, form):
        if form.get("subject_token_type") != ACCESS_TOKEN:
            return self.refuse(400, "invalid_request", "subject_token_type")
        subject_token = form.get("subject_token", "")
        claims = verify_rs256(subject_token, args.jwk)
        if claims is None:
            return self.refuse(400, "invalid_grant", "subject token signature")
        now = time.time()
        aud = claims.get("aud")
        auds = aud if isinstance(aud, list) else [aud]
        if (
            claims.get("iss") != args.issuer
            or args.subject_audience not in auds
            or not isinstance(claims.get("exp"), (int, float))
            or claims["exp"] < now
        ):
            return self.refuse(400, "invalid_grant", "subject token claims")
        sub = claims.get("sub", "")
        if sub in args.refuse_subject:
            with lock:
                stats["refused"].append("refused subject")
            # Careless on purpose: the description quotes what must never reach a client.
            detail = f"subject {subject_token} refused for client {args.client_id}:{args.client_secret}"
            return self.reply(400, {"error": "invalid_grant", "error_description": detail})
        audience = form.get("audience")
        if audience not in args.allow_audience:
            return self.refuse(400, "invalid_target", "audience")
        if args.expect_scope is not None and form.get("scope") != args.expect_scope:
            return self.refuse(400, "invalid_scope", "scope")
        with lock:
            n = stats["exchanges"].get(sub, 0) + 1
            stats["exchanges"][sub] = n
        self.issue(f"xt.{sub}.{audience}.{n}", exchange=True)

    def issue(self, token, exchange):
        body = {"access_token": token, "token_type": "Bearer", "expires_in": args.lifetime}
        if exchange:
            body["issued_token_type"] = ACCESS_TOKEN
        self.reply(200, body)

    def refuse(self, status, code, reason):
        with lock:
            stats["refused"].append(reason)
        self.reply(status, {"error": code})

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("cache-control", "no-store")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--jwk", required=True, help="the incoming issuer's public JWK (a file)")
    p.add_argument("--issuer", required=True)
    p.add_argument("--subject-audience", required=True)
    p.add_argument("--client-id", required=True)
    p.add_argument("--client-secret", required=True)
    p.add_argument("--allow-audience", action="append", default=[])
    p.add_argument("--expect-scope")
    p.add_argument("--refuse-subject", action="append", default=[])
    p.add_argument("--lifetime", type=int, default=600)
    args = p.parse_args()
    with open(args.jwk) as f:
        args.jwk = json.load(f)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening on http://127.0.0.1:%d/token" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
