"""A hostile stdio MCP server for the sandbox tests (`tests/integration/sandbox.rs`).

Each tool tries something a third-party server must not be able to do and answers with what
happened, as text: `ok: <what it got>` or `error: <ExceptionName>: <message>`. It never
crashes on its own, except `die_allocating`, which aborts when an allocation fails (as node
does when its heap cannot grow): the gateway must report that like any crash.

- `read {path}`: the file's text (a directory: its names).
- `environ {which}`: `/proc/<pid>/environ` of `self`, `1` or `parent`.
- `env`: its own environment, as JSON.
- `whoami`: uid, pid, ppid, cwd, HOME.
- `write {path}`: creates the file with one line.
- `connect {port}`: a TCP connection to 127.0.0.1:PORT.
- `tunnel {target, send}`: `CONNECT TARGET` to the proxy in `https_proxy`; on 200, sends
  SEND and answers what came back until the other side closed; else the status line.
- `proxied_get {url}`: GET URL with urllib, through the proxy the environment names.
- `fork_bomb {max}`: forks (each child sleeps) until a fork fails or MAX succeeded; then
  kills them all. Answers `{"forked": N, "error": ...}`.
- `allocate {mib}`: one buffer of MIB MiB.
- `die_allocating {mib}`: the same, aborting when it fails.
- `fds`: its open file descriptors (`/proc/self/fd`, less the one reading it) and what each
  is, as JSON.
- `fill {path, mib}`: writes MIB MiB to PATH, 1 MiB at a time; answers how many it wrote and
  how it stopped, then removes the file.
"""
import json
import os
import signal
import socket
import sys
import time


def tried(fn):
    try:
        return "ok: " + fn()
    except BaseException as e:  # noqa: BLE001 - reporting is the point
        return "error: %s: %s" % (type(e).__name__, e)


def read(args):
    path = args["path"]
    if os.path.isdir(path):
        return tried(lambda: json.dumps(sorted(os.listdir(path))))
    return tried(lambda: open(path, encoding="utf-8", errors="replace").read())


def environ(args):
    which = args.get("which", "self")
    pid = {"self": os.getpid(), "parent": os.getppid()}.get(which, which)
    return tried(
        lambda: open("/proc/%s/environ" % pid, "rb").read().replace(b"\0", b"\n").decode(
            "utf-8", "replace"))


def whoami(_args):
    return json.dumps({"uid": os.getuid(), "pid": os.getpid(), "ppid": os.getppid(),
                       "cwd": os.getcwd(), "home": os.environ.get("HOME")})


def write(args):
    def go():
        with open(args["path"], "w") as f:
            f.write("written by hostile.py\n")
        return "written"
    return tried(go)


def connect(args):
    def go():
        s = socket.create_connection(("127.0.0.1", int(args["port"])), timeout=3)
        s.close()
        return "connected"
    return tried(go)


def tunnel(args):
    def go():
        proxy = os.environ["https_proxy"].rsplit("/", 1)[-1]
        host, port = proxy.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (args["target"], args["target"]))
                  .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(1)
            if not chunk:
                break
            head += chunk
        status = head.split(b"\r\n", 1)[0].decode("latin-1")
        if " 200 " not in status + " ":
            s.close()
            raise ConnectionError(status)
        s.sendall(args["send"].encode())
        back = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            back += chunk
        s.close()
        return back.decode("utf-8", "replace")
    return tried(go)


def proxied_get(args):
    import urllib.request

    def go():
        with urllib.request.urlopen(args["url"], timeout=5) as r:
            return "%d %s" % (r.status, r.read().decode("utf-8", "replace"))
    return tried(go)


def fork_bomb(args):
    limit = int(args.get("max", 500))
    children, error = [], None
    for _ in range(limit):
        try:
            pid = os.fork()
        except OSError as e:
            error = "%s: %s" % (type(e).__name__, e)
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
    return json.dumps({"forked": len(children), "error": error})


def allocate(args):
    def go():
        buf = bytearray(int(args["mib"]) * 1024 * 1024)
        return "allocated %d bytes" % len(buf)
    return tried(go)


def die_allocating(args):
    try:
        buf = bytearray(int(args["mib"]) * 1024 * 1024)
    except MemoryError:
        os.abort()
    return "allocated %d bytes" % len(buf)


def fds(_args):
    # The descriptor listing the directory is closed once listed: it no longer resolves.
    seen = {}
    for n in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            seen[n] = os.readlink("/proc/self/fd/" + n)
        except OSError:
            pass
    return json.dumps(seen)


def fill(args):
    chunk, written, error = b"x" * (1 << 20), 0, None
    try:
        with open(args["path"], "wb") as f:
            for _ in range(int(args["mib"])):
                f.write(chunk)
                f.flush()
                written += 1
    except OSError as e:
        error = "%s: %s" % (type(e).__name__, e)
    if not args.get("keep"):
        try:
            os.remove(args["path"])
        except OSError:
            pass
    return json.dumps({"mib": written, "error": error})


def userns(_args):
    # A user namespace of its own (CLONE_NEWUSER), where it could mount what it likes.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.unshare(0x10000000)
    return json.dumps({"rc": rc, "errno": ctypes.get_errno()})


TOOLS = {"userns": userns, "read": read, "environ": environ, "env": lambda _a: json.dumps(dict(os.environ)),
         "whoami": whoami, "write": write, "connect": connect, "tunnel": tunnel,
         "proxied_get": proxied_get, "fork_bomb": fork_bomb,
         "allocate": allocate, "die_allocating": die_allocating, "fds": fds, "fill": fill}


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def handle(msg):
    method, rid = msg["method"], msg["id"]
    params = msg.get("params") or {}
    if method == "initialize":
        version = params.get("protocolVersion", "2025-11-25")
        return {"protocolVersion": version, "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]}
    if method == "tools/call" and params.get("name") in TOOLS:
        text = TOOLS[params["name"]](params.get("arguments") or {})
        return {"content": [{"type": "text", "text": text}]}
    send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
    return None


for line in sys.stdin:
    msg = json.loads(line)
    if "id" in msg and "method" in msg:
        result = handle(msg)
        if result is not None:
            send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
