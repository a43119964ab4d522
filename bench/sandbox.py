#!/usr/bin/env python3
"""What the bubblewrap sandbox costs at startup (issue 35): time to a ready backend, with and
without the sandbox, measured in one run on one machine, runs interleaved (on, off, on, …) so
a noisy neighbour hits both alike.

Usage: bench/sandbox.py [RUNS]   (default 15; SWITCHBOARD_BIN picks the binary, default
target/release/switchboard, else target/debug/switchboard; SANDBOX_BENCH_NPX=1 adds
@modelcontextprotocol/server-everything through npx from a copy of ~/.npm, which must hold it)

Cells:
- serve-ready: `switchboard serve` with one stdio fixture backend, from spawn to its
  "listening on" line (the backend is started and has answered `initialize` by then).
- session-spawn: `isolation: per-session` (Legacy-only fixture), a new session's
  `initialize` plus its first `tools/call`, which starts and handshakes the session's own
  process; the median over RUNS sessions of one gateway.
- bwrap-true: the sandbox alone, `true` in it (no gateway), against plain `true`.
- npx-ready (opt-in): `npx -y server-everything` offline from a warm npm cache.
Prints a markdown table (medians, p90, ratio on/off).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 15


def binary():
    given = os.environ.get("SWITCHBOARD_BIN")
    if given:
        return given
    for profile in ("release", "debug"):
        path = os.path.join(ROOT, "target", profile, "switchboard")
        if os.path.exists(path):
            return path
    sys.exit("build switchboard first (cargo build --release)")


SB = binary()
WORK = tempfile.mkdtemp(prefix="sb-bench-sandbox-")
# A root gateway's sandboxed backends run as nobody, who must reach their home through it.
os.chmod(WORK, 0o755)


def config(name, backend_yaml, sandbox):
    path = os.path.join(WORK, name + ("-on" if sandbox else "-off") + ".yaml")
    top = "sandbox: {home: %s}\n" % os.path.join(WORK, "home-" + name) if sandbox else ""
    with open(path, "w") as f:
        f.write(top + "backends:\n" + backend_yaml)
    return path


def start(path):
    """`serve --config PATH`; returns (process, url, seconds to listening)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([SB, "serve", "--config", path, "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if line.startswith("switchboard: listening on "):
            return p, line.split()[-1], time.perf_counter() - t0
    p.kill()
    sys.exit("serve did not start: " + path)


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()


def post(url, body, session=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream"})
    if session:
        req.add_header("mcp-session-id", session)
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
        return r.headers.get("mcp-session-id")


def session_spawn(url):
    t0 = time.perf_counter()
    sid = post(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}})
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    post(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "x"}}}, sid)
    return time.perf_counter() - t0


def summary(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.9))]


def serve_ready(name, backend_yaml, runs):
    on, off = config(name, backend_yaml, True), config(name, backend_yaml, False)
    times = {True: [], False: []}
    for i in range(runs * 2 + 2):
        sandbox = i % 2 == 0
        p, _, t = start(on if sandbox else off)
        stop(p)
        if i >= 2:  # the first pair warms caches
            times[sandbox].append(t)
    return times


def per_session(runs):
    fixture = "  - name: f\n    command: %s\n    args: [fixture, --era, legacy]\n    isolation: per-session\n" % SB
    times = {}
    for sandbox in (True, False):
        p, url, _ = start(config("session", fixture, sandbox))
        session_spawn(url)
        times[sandbox] = [session_spawn(url) for _ in range(runs)]
        stop(p)
    return times


def bwrap_true(runs):
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.getuid() == 0 else []
    boxed = as_nobody + ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                         "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "prlimit",
                         "--nproc=256", "--", "true"]
    times = {True: [], False: []}
    for i in range(runs * 2):
        sandbox = i % 2 == 0
        t0 = time.perf_counter()
        subprocess.run(boxed if sandbox else ["true"], check=True)
        times[sandbox].append(time.perf_counter() - t0)
    return times


def npx_ready(runs):
    """server-everything offline from a warm cache, in the sandbox's home and outside it."""
    cache = os.path.join(WORK, "home-npx")
    os.makedirs(cache, exist_ok=True)
    # The caller's npm cache, which must already hold the package (run it once with npx).
    shutil.copytree(os.path.expanduser("~/.npm"), os.path.join(cache, ".npm"), symlinks=True)
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", "65534:65534", cache], check=True)
    backend = ("  - name: npx\n    command: npx\n    args: [-y, \"@modelcontextprotocol/server-everything@2026.8.31\"]\n"
               "    env: {npm_config_offline: \"true\", HOME: %s}\n" % cache)
    on = os.path.join(WORK, "npx-on.yaml")
    with open(on, "w") as f:
        f.write("sandbox: {home: %s}\nbackends:\n" % cache
                + backend.replace("HOME: %s" % cache, "HOME: /home/switchboard"))
    off = os.path.join(WORK, "npx-off.yaml")
    with open(off, "w") as f:
        f.write("backends:\n" + backend)
    times = {True: [], False: []}
    for i in range(runs * 2):
        sandbox = i % 2 == 0
        p, _, t = start(on if sandbox else off)
        stop(p)
        times[sandbox].append(t)
    return times


def row(name, times, unit=1000.0):
    (m_on, p_on), (m_off, p_off) = summary(times[True]), summary(times[False])
    print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.2f× | %+.1f |" % (
        name, len(times[True]), m_off * unit, p_off * unit, m_on * unit, p_on * unit, m_on / m_off,
        (m_on - m_off) * unit))


def main():
    print("binary: %s; runs per cell: %d; load average before: %s" % (
        SB, RUNS, open("/proc/loadavg").read().split()[0]))
    print()
    print("| cell | runs | off median ms | off p90 ms | on median ms | on p90 ms | on/off | added ms |")
    print("|---|---|---|---|---|---|---|---|")
    row("bwrap-true (no gateway)", bwrap_true(RUNS))
    fixture = "  - name: f\n    command: %s\n    args: [fixture]\n" % SB
    row("serve-ready (fixture)", serve_ready("ready", fixture, RUNS))
    row("session-spawn (per-session fixture)", per_session(RUNS))
    if os.environ.get("SANDBOX_BENCH_NPX"):
        row("npx-ready (server-everything, warm cache)", npx_ready(max(3, RUNS // 3)))
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
