#!/usr/bin/env python3
"""The command the conformance suite's client leg runs (scripts/conformance-client.sh).

    conformance-client-driver.py SERVER_URL    (the suite appends the URL)

The suite judges an MCP *client*; here that client is the gateway's upstream client. This
driver starts `switchboard run --url SERVER_URL` on a free loopback port (the binary in
SWITCHBOARD_BIN, else target/debug/switchboard), waits for `/readyz`, and then, as a
downstream MCP client *through the gateway*, does what the scenario (MCP_CONFORMANCE_SCENARIO)
expects a client to do: list and call tools, answer an elicitation with its defaults, fulfil
an input request. It speaks the era MCP_CONFORMANCE_PROTOCOL_VERSION names: a 2025-11-25 run
is a Legacy session (`initialize`, `Mcp-Session-Id`), a 2026-07-28 run stateless Modern
requests (per-request `_meta`, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
`Mcp-Param-*`). Then it stops the gateway. Python 3.11 standard library only.

Exit status: 0 when every step it took got an answer (a JSON-RPC error is an answer), 1 when
the gateway did not start or a step got no answer. The gateway's log is copied to stderr,
which the suite keeps with the scenario's results.
"""

from __future__ import annotations

import base64
import http.client
import http.cookiejar
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
URL_ELICITATION_REQUIRED = -32042
CLIENT_INFO = {"name": "switchboard-conformance-driver", "version": "1.0.0"}
# Each step's bound (the suite gives the whole scenario 30 s; sse-retry waits its retry).
STEP_TIMEOUT = 20.0


def log(text: str) -> None:
    print(f"driver: {text}", file=sys.stderr, flush=True)


class Gateway:
    """`switchboard run --url URL` on a free loopback port, until `stop`."""

    def __init__(self, upstream: str, extra: list[str] | None = None) -> None:
        binary = os.environ.get("SWITCHBOARD_BIN") or str(ROOT / "target/debug/switchboard")
        args = [binary, "run", "--host", "127.0.0.1", "--port", "0", "--url", upstream]
        args += extra or []
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.url: str | None = None
        self._listening = threading.Event()
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.stdout.append(line)
            prefix = "switchboard: listening on "
            if self.url is None and line.startswith(prefix):
                self.url = line[len(prefix):].strip()
                self._listening.set()
        self._listening.set()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr.append(raw.decode(errors="replace").rstrip("\n"))

    def wait_ready(self, bound: float = 25.0) -> str:
        """The gateway's MCP URL, once it listens and `/readyz` answers 200."""
        deadline = time.monotonic() + bound
        self._listening.wait(bound)
        if self.url is None:
            raise RuntimeError("the gateway exited or did not listen in time")
        parts = urllib.parse.urlsplit(self.url)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway exited ({self.proc.returncode})")
            try:
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=2)
                conn.request("GET", "/readyz")
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    return self.url
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the gateway did not become ready (/readyz) in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(0.05)  # let the drains take the last lines
        for line in self.stdout + self.stderr:
            print(f"gateway: {line}", file=sys.stderr)


class Reply:
    """One HTTP answer: its status, headers, and the JSON-RPC messages it carried."""

    def __init__(self, status: int, headers: dict[str, str], messages: list[dict]) -> None:
        self.status = status
        self.headers = headers
        self.messages = messages


def sse_events(response: http.client.HTTPResponse):
    """The `data` of each event of an SSE body, as it arrives."""
    data: list[str] = []
    for raw in response:
        line = raw.decode().rstrip("\r\n")
        if line == "":
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


def header_value(value) -> str | None:
    """A `Mcp-Param-*` value: the parameter's text, Base64-wrapped where a header cannot carry
    it as is (non-ASCII, control characters, leading or trailing whitespace); None omits it."""
    if value is None:
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = json.dumps(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    plain = all(0x20 <= ord(c) <= 0x7E for c in text) and text == text.strip(" ")
    if plain:
        return text
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def defaults_of(schema: dict) -> dict:
    """Content for an accepted form elicitation: every property's default (SEP-1034), and a
    plausible value for a property without one."""
    content = {}
    for name, prop in (schema.get("properties") or {}).items():
        if "default" in prop:
            content[name] = prop["default"]
        elif prop.get("type") == "boolean":
            content[name] = True
        elif prop.get("enum"):
            content[name] = prop["enum"][0]
        elif prop.get("type") in ("number", "integer"):
            content[name] = 1
        elif prop.get("type") == "string":
            content[name] = "conformance"
    return content


def follow_in_browser(url: str) -> None:
    """What a user's browser does with the URL a consent elicitation carries: open the
    gateway's start page, click its button (a form POST with the page's anti-forgery field
    and cookie), follow the redirects to the authorization server and back to the gateway's
    /oauth/callback, carrying the cookie the click set (the callback is refused without it)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RuntimeError("an authorization URL that is not http(s)")
    browser = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    try:
        with browser.open(url, timeout=STEP_TIMEOUT) as page:
            html = page.read().decode("utf-8", "replace")
        fields = dict(re.findall(r'name="(flow|csrf)" value="([^"]*)"', html))
        action = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/oauth/start", "", ""))
        form = urllib.parse.urlencode(fields).encode()
        origin = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        click = urllib.request.Request(action, data=form, headers={"Origin": origin})
        with browser.open(click, timeout=STEP_TIMEOUT) as page:
            log(f"browser: {page.status} at {urllib.parse.urlsplit(page.url).path}")
    except urllib.error.HTTPError as e:
        log(f"browser: {e.code} at {urllib.parse.urlsplit(e.url or '').path}")


def fulfil(request: dict) -> dict:
    """This client's answer to a server→client request (or an input request)."""
    method = request.get("method")
    params = request.get("params") or {}
    if method == "elicitation/create":
        if params.get("mode") == "url":
            follow_in_browser(params.get("url") or "")
            return {"action": "accept"}
        return {"action": "accept", "content": defaults_of(params.get("requestedSchema") or {})}
    if method == "sampling/createMessage":
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "conformance"},
            "model": "conformance-driver",
            "stopReason": "endTurn",
        }
    if method == "roots/list":
        return {"roots": []}
    return {}


class Client:
    """A downstream MCP client of the gateway, Legacy (a session) or Modern (stateless)."""

    def __init__(self, url: str, modern: bool, capabilities: dict) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path or "/mcp"
        self.modern = modern
        self.capabilities = capabilities
        self.session: str | None = None
        self.ids = itertools.count(1)
        self.tools: dict[str, dict] = {}

    def _post(self, body: dict, headers: dict[str, str], on_request=None) -> Reply:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=STEP_TIMEOUT)
        all_headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        }
        if self.session:
            all_headers["Mcp-Session-Id"] = self.session
        conn.request("POST", self.path, json.dumps(body).encode(), all_headers)
        response = conn.getresponse()
        status = response.status
        got = {k.lower(): v for k, v in response.getheaders()}
        messages: list[dict] = []
        kind = got.get("content-type", "").split(";")[0].strip().lower()
        if kind == "text/event-stream":
            for data in sse_events(response):
                if not data.strip():
                    continue
                message = json.loads(data)
                messages.append(message)
                if "method" in message and "id" in message and on_request:
                    on_request(message)
                if "method" not in message and message.get("id") == body.get("id"):
                    break
        else:
            raw = response.read()
            if raw.strip():
                messages.append(json.loads(raw))
        conn.close()
        return Reply(status, got, messages)

    def _headers(self, method: str, params: dict) -> dict[str, str]:
        if not self.modern:
            return {"MCP-Protocol-Version": LEGACY} if self.session else {}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        name = params.get("name") if method in ("tools/call", "prompts/get") else None
        name = params.get("uri") if method == "resources/read" else name
        if name is not None:
            headers["Mcp-Name"] = header_value(name) or ""
        if method == "tools/call":
            schema = (self.tools.get(params.get("name")) or {}).get("inputSchema") or {}
            args = params.get("arguments") or {}
            for prop, spec in (schema.get("properties") or {}).items():
                designated = isinstance(spec, dict) and spec.get("x-mcp-header")
                value = header_value(args.get(prop)) if designated else None
                if value is not None:
                    headers[f"Mcp-Param-{designated}"] = value
        return headers

    def request(self, method: str, params: dict | None = None) -> dict:
        """The JSON-RPC response to one request (Legacy: server→client requests on its stream
        are answered as they come)."""
        params = dict(params or {})
        if self.modern:
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": self.capabilities,
                "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
                **(params.get("_meta") or {}),
            }
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        reply = self._post(body, self._headers(method, params), self._answer_server_request)
        if method == "initialize" and "mcp-session-id" in reply.headers:
            self.session = reply.headers["mcp-session-id"]
        for message in reply.messages:
            if "method" not in message and message.get("id") == body["id"]:
                return message
        # A refusal before the request was read (HTTP 4xx) may carry no id.
        for message in reply.messages:
            if "error" in message:
                return message
        raise RuntimeError(f"{method}: no answer (HTTP {reply.status})")

    def notify(self, method: str) -> None:
        body = {"jsonrpc": "2.0", "method": method}
        self._post(body, self._headers(method, {}))

    def _answer_server_request(self, message: dict) -> None:
        log(f"answering the gateway's {message.get('method')}")
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": fulfil(message)}
        self._post(answer, self._headers("", {}) if not self.modern else {})

    # ---- MCP operations ----------------------------------------------------------------

    def start(self) -> None:
        if self.modern:
            return
        init = self.request(
            "initialize",
            {"protocolVersion": LEGACY, "capabilities": self.capabilities, "clientInfo": CLIENT_INFO},
        )
        log(f"initialize: {json.dumps(init)[:300]}")
        self.notify("notifications/initialized")

    def end(self) -> None:
        if self.session:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
            conn.request("DELETE", self.path, headers={"Mcp-Session-Id": self.session})
            conn.getresponse().read()
            conn.close()

    def authorized(self, method: str, params: dict | None = None) -> dict:
        """`request`, where a URL elicitation (-32042: a backend needs the user's
        authorization) is followed in the browser and the request retried."""
        base = dict(params or {})
        for _round in range(4):
            answer = self.request(method, params)
            result = answer.get("result") or {}
            if result.get("resultType") == "input_required":
                # Modern: the input requests fulfilled (a URL one: the browser), then retried.
                inputs = result.get("inputRequests") or {}
                params = {**base, "inputResponses": {k: fulfil(r) for k, r in inputs.items()}}
                if "requestState" in result:
                    params["requestState"] = result["requestState"]
                continue
            error = answer.get("error") or {}
            if error.get("code") != URL_ELICITATION_REQUIRED:
                return answer
            log(f"{method}: authorization required")
            for elicitation in (error.get("data") or {}).get("elicitations") or []:
                if elicitation.get("mode") == "url":
                    follow_in_browser(elicitation.get("url") or "")
        return answer

    def list_tools(self) -> list[dict]:
        answer = self.authorized("tools/list")
        tools = (answer.get("result") or {}).get("tools") or []
        self.tools = {t["name"]: t for t in tools}
        log(f"tools/list: {sorted(self.tools)}")
        return tools

    def call_tool(self, name: str, arguments: dict | None = None, state_probe=None) -> dict:
        """`tools/call`; a Modern `input_required` result is fulfilled and the call retried
        (a new id, the input responses, the request state echoed exactly when one came)."""
        params: dict = {"name": name, "arguments": arguments or {}}
        for _round in range(8):
            answer = self.request("tools/call", params)
            result = answer.get("result") or {}
            log(f"tools/call {name}: {json.dumps(answer)[:300]}")
            error = answer.get("error") or {}
            if error.get("code") == URL_ELICITATION_REQUIRED:
                # The user authorizes in a browser, then the client retries the call.
                for elicitation in (error.get("data") or {}).get("elicitations") or []:
                    if elicitation.get("mode") == "url":
                        follow_in_browser(elicitation.get("url") or "")
                continue
            if result.get("resultType") != "input_required":
                return answer
            if state_probe:
                state_probe()
            responses = {
                key: fulfil(req) for key, req in (result.get("inputRequests") or {}).items()
            }
            params = {"name": name, "arguments": arguments or {}, "inputResponses": responses}
            if "requestState" in result:
                params["requestState"] = result["requestState"]
        raise RuntimeError(f"tools/call {name}: still input_required after 8 rounds")


def placeholder_arguments(tool: dict) -> dict:
    """Arguments for a tool the scenario does not spell out: a value per required property."""
    schema = tool.get("inputSchema") or {}
    args = {}
    for prop in schema.get("required") or []:
        spec = (schema.get("properties") or {}).get(prop) or {}
        kind = spec.get("type")
        args[prop] = {"number": 1, "integer": 1, "boolean": True, "object": {}, "array": []}.get(
            kind, "us-west1"
        )
    return args


def run_scenario(scenario: str, client: Client, context: dict) -> None:
    client.start()
    if scenario == "initialize":
        client.list_tools()
    elif scenario == "tools_call":
        client.list_tools()
        client.call_tool("add_numbers", {"a": 5, "b": 3})
    elif scenario == "elicitation-sep1034-client-defaults":
        client.list_tools()
        client.call_tool("test_client_elicitation_defaults")
    elif scenario == "sse-retry":
        client.list_tools()
        client.call_tool("test_reconnection")
    elif scenario == "json-schema-2020-12-preservation":
        tools = {t["name"]: t for t in client.list_tools()}
        focal = tools.get("json_schema_2020_12_tool") or {}
        client.call_tool("json_schema_echo", {"schema": focal.get("inputSchema") or {}})
    elif scenario == "request-metadata":
        client.list_tools()
    elif scenario == "sep-2322-client-request-state":
        client.list_tools()
        # A plain call made while the first call waits for its input: nothing of that
        # call's input may ride along with it.
        unrelated = {"done": False}

        def between_rounds() -> None:
            if not unrelated["done"]:
                unrelated["done"] = True
                client.call_tool("test_mrtr_unrelated")

        client.call_tool("test_mrtr_echo_state", state_probe=between_rounds)
        client.call_tool("test_mrtr_no_state")
        client.call_tool("test_mrtr_no_result_type")
    elif scenario == "http-standard-headers":
        for tool in client.list_tools():
            client.call_tool(tool["name"], placeholder_arguments(tool))
        resources = (client.request("resources/list").get("result") or {}).get("resources") or []
        for resource in resources:
            client.request("resources/read", {"uri": resource["uri"]})
        prompts = (client.request("prompts/list").get("result") or {}).get("prompts") or []
        for prompt in prompts:
            client.request("prompts/get", {"name": prompt["name"]})
    elif scenario == "http-custom-headers":
        client.list_tools()
        for call in context.get("toolCalls") or []:
            client.call_tool(call["name"], call.get("arguments") or {})
    elif scenario == "http-invalid-tool-headers":
        listed = client.list_tools()
        for tool in listed:
            client.call_tool(tool["name"], placeholder_arguments(tool))
        # The invalid tools the scenario serves, by name, whether or not the gateway listed
        # them: the gateway must refuse every one of them, not pass it on.
        for name in (
            "invalid_empty_header",
            "invalid_object_header",
            "invalid_array_header",
            "invalid_null_header",
            "invalid_number_header",
            "invalid_duplicate_same_case",
            "invalid_duplicate_diff_case",
            "invalid_space_in_name",
            "invalid_colon_in_name",
            "invalid_non_ascii_name",
            "invalid_control_char_name",
        ):
            if name not in client.tools:
                client.call_tool(name, {"value": "x"})
    elif scenario == "json-schema-ref-no-deref":
        client.list_tools()
        client.call_tool("lookup_user", {"id": "user-1"})
    elif scenario.startswith("auth/"):
        client.list_tools()
        client.call_tool("test-tool")
    else:
        # An unknown scenario: list and call what is listed.
        for tool in client.list_tools():
            client.call_tool(tool["name"], placeholder_arguments(tool))
    client.end()


def authorization_server(upstream: str) -> str | None:
    """The issuer the upstream's protected-resource metadata names first (path-aware, then
    root well-known): the server the scenario's pre-registered client belongs to, which an
    operator would configure as `authorizationServer`."""
    parts = urllib.parse.urlsplit(upstream)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    candidates = [f"{origin}/.well-known/oauth-protected-resource{path}"] if path else []
    candidates.append(f"{origin}/.well-known/oauth-protected-resource")
    for url in candidates:
        try:
            with urllib.request.urlopen(url, timeout=STEP_TIMEOUT) as page:
                servers = json.load(page).get("authorization_servers") or []
        except (urllib.error.URLError, ValueError, OSError):
            continue
        if servers and isinstance(servers[0], str):
            return servers[0]
    return None


def gateway_flags(scenario: str, context: dict, upstream: str) -> list[str]:
    """The gateway's flags for a scenario: per-user OAuth to the upstream for auth/*, with
    the pre-registered client the scenario names (its secret in a private file, pinned to
    the authorization server the upstream names), and the Client ID Metadata Document URL
    the suite expects."""
    if not scenario.startswith("auth/"):
        return []
    flags = [
        "--upstream-auth", "oauth",
        "--upstream-client-metadata-url", "https://conformance-test.local/client-metadata.json",
    ]
    if context.get("client_id") and context.get("client_secret"):
        import tempfile
        fd, path = tempfile.mkstemp(prefix="sb-conformance-secret-")
        with os.fdopen(fd, "w") as f:
            f.write(context["client_secret"] + "\n")
        os.chmod(path, 0o600)
        flags += ["--upstream-client-id", context["client_id"], "--upstream-client-secret-file", path]
        issuer = authorization_server(upstream)
        if issuer:
            flags += ["--upstream-authorization-server", issuer]
    return flags


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: conformance-client-driver.py SERVER_URL", file=sys.stderr)
        return 2
    upstream = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", LEGACY)
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    modern = version >= MODERN
    # Elicitation (form) is the one capability a scenario asks of this client; Modern
    # input requests are answered whatever the capability (the retry carries them).
    capabilities = {"elicitation": {"form": {}}} if modern else {"elicitation": {}}
    log(f"scenario {scenario}, {'Modern' if modern else 'Legacy'} {version}, upstream {upstream}")
    gateway = Gateway(upstream, gateway_flags(scenario, context, upstream))
    status = 0
    try:
        url = gateway.wait_ready()
        log(f"gateway ready at {url}")
        run_scenario(scenario, Client(url, modern, capabilities), context)
    except Exception as e:  # noqa: BLE001 - any failure is reported and fails the run
        log(f"failed: {type(e).__name__}: {e}")
        status = 1
    finally:
        gateway.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
