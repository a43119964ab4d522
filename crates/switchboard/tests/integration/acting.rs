//! Acting as the caller upstream (issue 32, first slice), through the real binary: a test
//! token service (`acting/test_sts.py`: RFC 8693 exchange of the test issuer's RS256 JWTs,
//! client credentials) and a remote MCP server that records every request's `Authorization`
//! and tells it back (`acting/upstream.py`, Modern stateless or Legacy with sessions), both on
//! loopback port 0. The tests assert exact tokens: the upstream sees each caller's own
//! exchanged token and never another's, never a caller's original token, and the token
//! service counts the exchanges.

mod browser;
mod client_credentials;
mod exchange;
mod oauth;
mod oauth_hostile;
mod oauth_leaks;
mod oauth_refresh;
mod oauth_replicas;
mod oidc;
mod passthrough;
mod real_browser;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::TestGateway;

pub(crate) const CLIENT_ID: &str = "switchboard";
/// The gateway's client secret at the token service: must never reach a client or a log.
pub(crate) const CLIENT_SECRET: &str = "sts-secret-7f3a9c-never-shown";
/// The audience the gateway asks tokens for.
pub(crate) const AUDIENCE: &str = "acting-mcp";
const V: &str = "2026-07-28";

fn script(name: &str) -> String {
    format!(
        "{}/tests/integration/acting/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Starts `python3 SCRIPT ARGS` and reads its `listening on URL` line.
async fn python(name: &str, args: &[&str]) -> (Child, String) {
    listening("python3", name, args).await
}

/// Starts `PROGRAM SCRIPT ARGS` and reads its `listening on URL` line.
async fn listening(program: &str, name: &str, args: &[&str]) -> (Child, String) {
    let mut child = Command::new(program)
        .arg(script(name))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{name} did not start"))
        .unwrap()
        .unwrap();
    let url = line
        .strip_prefix("listening on ")
        .expect("its address")
        .to_owned();
    (child, url)
}

/// The test token service.
pub(crate) struct Sts {
    _child: Child,
    /// Its token endpoint.
    pub(crate) url: String,
}

impl Sts {
    /// Accepts the test issuer's JWTs (key `k1`) for the gateway's audience, and the gateway's
    /// client credentials; `extra`: more flags (`--refuse-subject mallory`, ...).
    pub(crate) async fn start(extra: &[&str]) -> Sts {
        let jwk = format!(
            "{}/tests/integration/keys/k1.jwk.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut args = vec![
            "--jwk",
            &jwk,
            "--issuer",
            crate::auth::ISSUER,
            "--subject-audience",
            crate::auth::AUDIENCE,
            "--client-id",
            CLIENT_ID,
            "--client-secret",
            CLIENT_SECRET,
            "--allow-audience",
            AUDIENCE,
        ];
        args.extend_from_slice(extra);
        let (child, url) = python("test_sts.py", &args).await;
        Sts { _child: child, url }
    }

    /// What it did: `{"exchanges": {sub: n}, "clientCredentials": n, "refused": [...]}`.
    pub(crate) async fn stats(&self) -> Value {
        let url = self.url.replace("/token", "/stats");
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }
}

/// The recording remote MCP server.
pub(crate) struct Upstream {
    _child: Child,
    pub(crate) url: String,
}

impl Upstream {
    /// `era`: `modern` or `legacy`; `extra`: more flags (`--refuse TOKEN`).
    pub(crate) async fn start(era: &str, extra: &[&str]) -> Upstream {
        let mut args = vec!["--era", era];
        args.extend_from_slice(extra);
        let (child, url) = python("upstream.py", &args).await;
        Upstream { _child: child, url }
    }

    /// Every request it received: `{"method", "auth", "session", "status"}`.
    pub(crate) async fn log(&self) -> Vec<Value> {
        let url = self.url.replace("/mcp", "/log");
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }

    /// The `Authorization` of each `tools/call` it received, in order.
    pub(crate) async fn calls(&self) -> Vec<String> {
        self.log()
            .await
            .iter()
            .filter(|e| e["method"] == "tools/call")
            .map(|e| e["auth"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// A per-test directory (removed on drop) holding the client secret's file, mode 0600.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    pub(crate) fn new(name: &str) -> Dir {
        use std::os::unix::fs::PermissionsExt;
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("sb-acting-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        let secret = path.join("sts.secret");
        std::fs::write(&secret, format!("{CLIENT_SECRET}\n")).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let keys = path.join("keys");
        std::fs::write(&keys, format!("ops:{API_KEY}\n")).unwrap();
        Dir(path)
    }

    pub(crate) fn secret(&self) -> String {
        self.0.join("sts.secret").to_string_lossy().into_owned()
    }

    pub(crate) fn keys(&self) -> String {
        self.0.join("keys").to_string_lossy().into_owned()
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The API key of the `ops` principal (a gateway secret: nothing to exchange).
pub(crate) const API_KEY: &str = "ops-key-0123456789abcdef0123";

/// The flags that make the gateway accept the test issuer's JWTs and the `ops` API key.
pub(crate) fn incoming(jwks: &str, keys: &str) -> Vec<String> {
    [
        "--jwt-issuer",
        crate::auth::ISSUER,
        "--jwks-url",
        jwks,
        "--jwt-audience",
        crate::auth::AUDIENCE,
        "--api-keys-file",
        keys,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A JWT of the test issuer for `sub`.
pub(crate) fn jwt(sub: &str) -> String {
    crate::auth::sign("k1", &crate::auth::claims(sub))
}

fn call(id: u64) -> Value {
    call_of(id, "whoami")
}

fn call_of(id: u64, tool: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":{}}})
}

/// Opens a Legacy (2025-11-25) session as the holder of `token`; its id.
pub(crate) async fn session(gw: &TestGateway, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let opened = gw
        .post_raw(None, init.to_string(), &[("authorization", &auth)])
        .await;
    assert_eq!(opened.status, 200, "{}", opened.text);
    let sid = opened.headers["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let done = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    gw.post_raw(Some(&sid), done.to_string(), &[("authorization", &auth)])
        .await;
    sid
}

/// `whoami` called in a Legacy session (`sid`, opened by the holder of `token`): the JSON-RPC
/// answer.
pub(crate) async fn legacy_call(gw: &TestGateway, token: &str, sid: &str) -> Value {
    let auth = format!("Bearer {token}");
    let r = gw
        .post_raw(Some(sid), call(1).to_string(), &[("authorization", &auth)])
        .await;
    json_of(&r.text)
}

/// `whoami` called as one stateless Modern (2026-07-28) request with `token`.
pub(crate) async fn modern_call(gw: &TestGateway, token: &str) -> Value {
    modern_tool(gw, token, "whoami").await
}

/// `tool` called as one stateless Modern (2026-07-28) request with `token`.
pub(crate) async fn modern_tool(gw: &TestGateway, token: &str, tool: &str) -> Value {
    let auth = format!("Bearer {token}");
    let mut body = call_of(2, tool);
    body["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}});
    let headers = [
        ("mcp-protocol-version", V),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
        ("authorization", auth.as_str()),
    ];
    let r = gw.post_raw(None, body.to_string(), &headers).await;
    json_of(&r.text)
}

/// A JSON body, or the last `data:` of an event stream.
fn json_of(text: &str) -> Value {
    if let Ok(v) = serde_json::from_str(text) {
        return v;
    }
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|d| !d.is_empty())
        .unwrap_or_else(|| panic!("no JSON in {text}"));
    serde_json::from_str(data).unwrap()
}

/// What `whoami` said the upstream saw.
pub(crate) fn seen(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no whoami text in {answer}"))
        .to_owned()
}
