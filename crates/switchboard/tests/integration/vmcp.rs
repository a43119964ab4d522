//! The virtual server through the real binary: `switchboard serve --config F.yaml` with
//! several backends (shared stdio fixtures, a remote `fixture --http`, a scripted growing
//! one) merged into one MCP server. Raw HTTP in both eras, and real clients (rmcp, the
//! Python SDKs, the TypeScript SDK).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, Reply, TestGateway};
use crate::fixture_http::FixtureHttp;

mod by_caps;
mod clients;
mod composite;
mod composite_ask;
pub(crate) mod driver;
mod failure;
pub(crate) mod forward;
mod identity;
mod listen;
mod merged;
mod one_backend;
mod own;
mod pages;
mod push;
mod schemes;
mod search;
mod startup;
mod tasks;

pub(crate) const SB: &str = env!("CARGO_BIN_EXE_switchboard");
pub(crate) const V: &str = "2026-07-28";

/// A per-test directory for the config file (and keys, policies), removed on drop.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    pub(crate) fn new(name: &str) -> Dir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sb-vmcp-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `backends:` entry running the built-in fixture on stdio, with extra YAML lines (already
/// indented by four spaces) for its settings.
pub(crate) fn stdio(name: &str, settings: &str) -> String {
    format!("  - name: {name}\n    command: {SB}\n    args: [fixture]\n{settings}")
}

/// A `backends:` entry for a remote server.
pub(crate) fn remote(name: &str, url: &str) -> String {
    format!("  - name: {name}\n    url: {url}\n")
}

/// A `backends:` entry for `backends/growy.py COUNT PAGE`.
pub(crate) fn growy(name: &str, count: usize, page: usize) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/growy.py"
    );
    format!(
        "  - name: {name}\n    command: python3\n    args: [{script}, \"{count}\", \"{page}\"]\n"
    )
}

/// A running `serve --config` and what it needs to keep running.
pub(crate) struct Served {
    pub(crate) gw: TestGateway,
    pub(crate) _dir: Dir,
    /// The remote backend, when there is one (killed on drop).
    pub(crate) _remote: Option<FixtureHttp>,
}

/// `switchboard serve --config` on `yaml` (port 0).
pub(crate) async fn serve(name: &str, yaml: &str, remote: Option<FixtureHttp>) -> Served {
    let dir = Dir::new(name);
    let config = dir.write("sb.yaml", yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    Served {
        gw,
        _dir: dir,
        _remote: remote,
    }
}

/// Beta's settings in the three-backend set: `exit` filtered out, `slow` exposed under a
/// name no other backend has (so it stays bare under `conditional`).
pub(crate) const BETA: &str =
    "    tools:\n      deny: [exit]\n      overrides: {slow: {name: beta_only_slow}}\n";

/// The three-backend set: fixtures `alpha` and `beta` on stdio, `gamma` a remote fixture.
/// The request timeout is long (30 s) so "fails fast" is measurably far below it.
pub(crate) async fn trio(name: &str, top: &str) -> Served {
    let gamma = FixtureHttp::start(&[]).await;
    let yaml = format!(
        "timeouts: {{request: 30s}}\n{top}backends:\n{}{}{}",
        stdio("alpha", ""),
        stdio("beta", BETA),
        remote("gamma", &gamma.url)
    );
    serve(name, &yaml, Some(gamma)).await
}

/// A Legacy request body.
pub(crate) fn request(id: Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

/// A Modern request (envelope in `_meta`, the required headers), with `extra` headers.
pub(crate) async fn modern(
    gw: &TestGateway,
    id: Value,
    method: &str,
    params: Value,
    extra: &[(&str, &str)],
) -> Reply {
    // The Tasks extension declared: its task methods exist only for requests that do.
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    modern_declaring(gw, (id, method), params, caps, extra).await
}

/// [`modern`] declaring the client capabilities `caps`.
pub(crate) async fn modern_declaring(
    gw: &TestGateway,
    (id, method): (Value, &str),
    mut params: Value,
    caps: Value,
    extra: &[(&str, &str)],
) -> Reply {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": caps});
    let name = params
        .get("name")
        .or(params.get("uri"))
        .or(params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut headers = vec![("mcp-protocol-version", V), ("mcp-method", method)];
    if let Some(n) = name.as_deref() {
        headers.push(("mcp-name", n));
    }
    headers.extend_from_slice(extra);
    let body = request(id, method, params);
    gw.post_raw(None, body.to_string(), &headers).await
}

/// Opens a Modern `subscriptions/listen` asking for `notifications` (its id `"L"`); the answer
/// is a stream (read it with `crate::modern::next_message`).
pub(crate) async fn modern_listen(gw: &TestGateway, notifications: Value) -> reqwest::Response {
    listen_with(gw, notifications, json!({}), None).await
}

/// [`modern_listen`] declaring the Tasks extension (task status needs it).
pub(crate) async fn modern_listen_declaring(
    gw: &TestGateway,
    notifications: Value,
) -> reqwest::Response {
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    listen_with(gw, notifications, caps, None).await
}

/// A Modern listen for `notifications`, declaring `caps`, as `key`'s holder (`None`: no
/// credential).
pub(crate) async fn listen_with(
    gw: &TestGateway,
    notifications: Value,
    caps: Value,
    key: Option<&str>,
) -> reqwest::Response {
    let params = json!({
        "_meta": {"io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": caps},
        "notifications": notifications});
    let body = json!({"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":params});
    let mut post = gw.http.post(&gw.url);
    if let Some(key) = key {
        post = post.header("authorization", format!("Bearer {key}"));
    }
    post.header("accept", crate::common::BOTH)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", V)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// Which era a helper speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// In this Legacy session.
    Legacy,
    Modern,
}

/// `method` in `era` (`session` for Legacy), asserting HTTP 200.
pub(crate) async fn ask(
    gw: &TestGateway,
    era: Era,
    session: Option<&str>,
    id: Value,
    method: &str,
    params: Value,
) -> Value {
    let r = match era {
        Era::Legacy => gw.post(session, &request(id, method, params)).await,
        Era::Modern => modern(gw, id, method, params, &[]).await,
    };
    assert_eq!(r.status, StatusCode::OK, "{era:?} {method}: {}", r.text);
    r.json()
}

/// The text a tool answers in `era`.
pub(crate) async fn call_text(
    gw: &TestGateway,
    era: Era,
    session: Option<&str>,
    name: &str,
    args: Value,
) -> String {
    let params = json!({"name": name, "arguments": args});
    let answer = ask(gw, era, session, json!(name), "tools/call", params).await;
    tool_text(&answer).to_owned()
}

/// Every page of a merged list in `era` (bounded), and how many pages it took.
pub(crate) async fn list_all(
    gw: &TestGateway,
    era: Era,
    session: Option<&str>,
    method: &str,
    key: &str,
) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 1..=20 {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let answer = ask(gw, era, session, json!(page), method, params).await;
        let result = &answer["result"];
        items.extend(
            result[key]
                .as_array()
                .unwrap_or_else(|| panic!("no {key} in {answer}"))
                .iter()
                .cloned(),
        );
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (items, page),
        }
    }
    panic!("{method} did not end within 20 pages");
}

/// The `name`s of listed items.
pub(crate) fn names(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every exposed tool name of the merged list in `era`, in order (all pages).
pub(crate) async fn tool_names(gw: &TestGateway, era: Era, session: Option<&str>) -> Vec<String> {
    names(&list_all(gw, era, session, "tools/list", "tools").await.0)
}
