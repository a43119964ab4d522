//! What the aggregating gateway (`serve` with several backends) answers itself, where the
//! conformance suite found it differing from the one-backend proxy: Modern method-not-found
//! is 404, a missing resource names its URI, and `Mcp-Param-*` headers are checked against
//! the tool the merged list routes to.

use std::path::PathBuf;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::process::Command;

use crate::common::{tool_text, TestGateway};
use crate::modern::modern;

const SWITCHBOARD: &str = env!("CARGO_BIN_EXE_switchboard");

/// A config file in its own temporary directory, removed on drop.
struct Config(PathBuf);

impl Config {
    fn new(name: &str, text: &str) -> Config {
        let dir = std::env::temp_dir().join(format!("sb-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("sb.yaml"), text).unwrap();
        Config(dir)
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `serve` with two dual-era fixtures `a` and `b`. The default `conditional` strategy
/// prefixes every tool (all collide), so `b_…` is a renamed tool of the second backend.
async fn two_fixtures(name: &str) -> (TestGateway, Config) {
    let config = Config::new(
        name,
        &format!(
            "listen: {{host: 127.0.0.1, port: 0}}\nbackends:\n  - {{name: a, command: {SWITCHBOARD}, args: [fixture, --era, dual]}}\n  - {{name: b, command: {SWITCHBOARD}, args: [fixture, --era, dual]}}\n"
        ),
    );
    let mut cmd = Command::new(SWITCHBOARD);
    cmd.arg("serve")
        .arg("--config")
        .arg(config.0.join("sb.yaml"));
    (TestGateway::start_command(cmd).await, config)
}

/// Modern methods that 2026-07-28 removed, and one nobody has, are 404 with -32601 (as a
/// Modern backend answers them through the one-backend proxy). Before, the aggregating path
/// answered 200, and `resources/subscribe` even -32602 (it routed by its empty URI).
#[tokio::test]
async fn aggregated_modern_method_not_found_is_404() {
    let (gw, _config) = two_fixtures("vmcp-404").await;
    let cases = [
        (
            "initialize",
            json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}),
        ),
        ("ping", json!({})),
        ("logging/setLevel", json!({"level":"debug"})),
        ("resources/subscribe", json!({"uri":"test://static-text"})),
        ("resources/unsubscribe", json!({"uri":"test://static-text"})),
        ("no/such-method", json!({})),
    ];
    for (i, (method, params)) in cases.into_iter().enumerate() {
        let r = modern(&gw, json!(i), method, params, &[]).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{method}: {}", r.text);
        assert_eq!(r.error_code(), -32601, "{method}: {}", r.text);
        assert_eq!(r.json()["id"], json!(i), "{method}");
    }
    // The Legacy era keeps them: ping is answered by the gateway itself.
    let session = gw.session().await;
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    let r = gw.post(Some(&session), &ping).await;
    assert_eq!(r.json()["result"], json!({}), "{}", r.text);
}

/// A URI no backend advertises is -32602 with the URI as `data.uri` (SEP-2164), in both
/// eras; before, the aggregating path left `data` out.
#[tokio::test]
async fn aggregated_missing_resource_names_its_uri() {
    let (gw, _config) = two_fixtures("vmcp-uri").await;
    let uri = "test://nonexistent-resource";
    let r = modern(&gw, json!(1), "resources/read", json!({"uri": uri}), &[]).await;
    let error = &r.json()["error"];
    assert_eq!(error["code"], -32602, "{}", r.text);
    assert_eq!(error["data"], json!({"uri": uri}), "{}", r.text);

    let session = gw.session().await;
    let read = json!({"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":uri}});
    let r = gw.post(Some(&session), &read).await;
    let error = &r.json()["error"];
    assert_eq!(error["code"], -32602, "{}", r.text);
    assert_eq!(error["data"], json!({"uri": uri}), "{}", r.text);
}

/// `Mcp-Param-*` (SEP-2243) are checked against the tool the merged list routes to, under
/// its backend's own name: before, the aggregating path looked the exposed name up nowhere
/// and let every call through unchecked.
#[tokio::test]
async fn aggregated_modern_call_checks_param_headers_of_a_renamed_tool() {
    let (gw, _config) = two_fixtures("vmcp-headers").await;
    let call = |id: u64, extra: &'static [(&'static str, &'static str)]| {
        let params = json!({"name":"b_test_custom_header","arguments":{"region":"Hello"}});
        let gw = &gw;
        async move { modern(gw, json!(id), "tools/call", params, extra).await }
    };
    let missing = call(1, &[]).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST, "{}", missing.text);
    assert_eq!(missing.error_code(), -32020, "{}", missing.text);
    let wrong = call(2, &[("mcp-param-region", "Goodbye")]).await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST, "{}", wrong.text);
    assert_eq!(wrong.error_code(), -32020, "{}", wrong.text);
    let right = call(3, &[("mcp-param-region", "Hello")]).await;
    assert_eq!(right.status, StatusCode::OK, "{}", right.text);
    let answer: Value = right.json();
    assert_eq!(tool_text(&answer), "region=Hello", "{}", right.text);
}
