//! `forwardCallerToken` from the config file to the wire: a remote in a set receives each
//! caller's own verified JWT, in both eras, and never another caller's.

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{stdio, Dir, SB};
use crate::auth::{claims, sign, Jwks, AUDIENCE, ISSUER};
use crate::common::{tool_text, TestGateway};

/// The Modern remote that answers `whoami` with the `Authorization` it received.
pub(crate) async fn whoami() -> (tokio::process::Child, String) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/whoami_http.py"
    );
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
        .await
        .expect("whoami did not start")
        .unwrap()
        .unwrap();
    let url = line
        .strip_prefix("listening on ")
        .expect("its address")
        .to_owned();
    (child, url)
}

fn call(id: u64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"whoami","arguments":{}}})
}

/// What the remote saw for a Legacy call in `token`'s own session.
async fn legacy_whoami(gw: &TestGateway, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let opened = gw
        .post_raw(None, init.to_string(), &[("authorization", &auth)])
        .await;
    let sid = opened.headers["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let r = gw
        .post_raw(Some(&sid), call(1).to_string(), &[("authorization", &auth)])
        .await;
    tool_text(&r.json()).to_owned()
}

/// What the remote saw for a Modern (stateless) call with `token`.
async fn modern_whoami(gw: &TestGateway, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let mut body = call(2);
    body["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": super::V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}});
    let r = reqwest::Client::new()
        .post(&gw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", super::V)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "whoami")
        .header("authorization", &auth)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    tool_text(&v).to_owned()
}

#[tokio::test]
async fn a_forwarding_remote_sees_each_callers_own_token() {
    let (_who, url) = whoami().await;
    let jwks = Jwks::serve(&["k1"]).await;
    let dir = Dir::new("forward");
    let yaml = format!(
        "backends:\n{}  - name: who\n    url: \"{url}\"\n    forwardCallerToken: true\n",
        stdio("alpha", "")
    );
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(["--jwt-issuer", ISSUER, "--jwks-url", &jwks.url])
        .args(["--jwt-audience", AUDIENCE]);
    let gw = TestGateway::start_command(cmd).await;
    let alice = sign("k1", &claims("alice"));
    let bob = sign("k1", &claims("bob"));
    // Interleaved, so a token remembered from one caller would show up in the other's call.
    assert_eq!(legacy_whoami(&gw, &alice).await, format!("Bearer {alice}"));
    assert_eq!(modern_whoami(&gw, &bob).await, format!("Bearer {bob}"));
    assert_eq!(legacy_whoami(&gw, &bob).await, format!("Bearer {bob}"));
    assert_eq!(modern_whoami(&gw, &alice).await, format!("Bearer {alice}"));
}
