"""Does an MCP gateway deliver one session's answers to another? A plain-HTTP check,
independent of `switchboard bench`.

    python3 bench/cross_session_check.py URL TOOL [SESSIONS] [CALLS]

Opens SESSIONS Legacy (2025-06-18) sessions at URL, then from every session at once sends
CALLS `tools/call TOOL {"text": ...}` requests, each with a text no other request uses, and
the same JSON-RPC ids in every session (1, 2, …: as independent clients would). Every answer
must echo its own request's text. Prints how many did not, and the first few (expected text,
received text, id). TOOL is an echo tool (the fixture's `echo`, as the gateway names it).
"""
import http.client
import json
import sys
import threading
import urllib.parse

URL = urllib.parse.urlparse(sys.argv[1])
TOOL = sys.argv[2]
SESSIONS = int(sys.argv[3]) if len(sys.argv) > 3 else 8
CALLS = int(sys.argv[4]) if len(sys.argv) > 4 else 5
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def post(conn, body, extra):
    conn.request("POST", URL.path, json.dumps(body), {**HEADERS, **extra})
    r = conn.getresponse()
    return r, r.read().decode()


def message(text):
    text = text.strip()
    if text.startswith("{"):
        return json.loads(text)
    for line in text.splitlines():
        if line.startswith("data:"):
            return json.loads(line[5:])
    return None


def session(n, wrong, total, lock):
    conn = http.client.HTTPConnection(URL.hostname, URL.port, timeout=60)
    init = {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "cross-session-check", "version": "0"}}
    r, _ = post(conn, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}, {})
    sid = {"mcp-session-id": r.getheader("mcp-session-id") or ""}
    post(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    for i in range(CALLS):
        text = f"session{n}-call{i}"
        call = {"name": TOOL, "arguments": {"text": text}}
        _, body = post(conn, {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": call}, sid)
        m = message(body) or {}
        got = (m.get("result") or {}).get("content", [{}])[0].get("text")
        with lock:
            total.append(1)
            if got != text:
                wrong.append((text, got, m.get("id")))


def main():
    wrong, total, lock = [], [], threading.Lock()
    threads = [threading.Thread(target=session, args=(n, wrong, total, lock)) for n in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{len(total)} answers, {len(wrong)} carried another request's text")
    for w in wrong[:6]:
        print("  expected %r, got %r (id %r)" % w)
    sys.exit(1 if wrong else 0)


main()
