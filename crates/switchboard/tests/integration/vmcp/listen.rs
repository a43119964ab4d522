//! A Modern `subscriptions/listen` on the virtual server: acknowledged with what the merged
//! capabilities feed, each URI subscribed at the backend that serves it, list changes from
//! every backend; a backend that does not serve a URI cannot announce it.

use serde_json::{json, Value};

use super::{call_text, serve, stdio, Era};
use crate::modern::next_message;

const WATCHED: &str = "test://watched-resource";

#[tokio::test]
async fn a_modern_listen_hears_every_backend_but_each_uri_only_from_its_server() {
    // Both fixtures list the watched URI; the first in configured order serves it (alpha).
    let yaml = format!("backends:\n{}{}", stdio("alpha", ""), stdio("beta", ""));
    let served = serve("listen", &yaml, None).await;
    let gw = &served.gw;
    let resp = super::modern_listen(
        gw,
        json!({"toolsListChanged": true, "resourceSubscriptions": [WATCHED, "test://nowhere"]}),
    )
    .await;
    let (mut events, ack) = acknowledged(resp).await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    // A URI no backend serves is not honoured.
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([WATCHED]),
        "{ack}"
    );

    let sid = gw.session().await;
    let trigger = |tool: &'static str, kind: &'static str| {
        let sid = sid.clone();
        async move {
            let args = json!({"kind": kind, "uri": WATCHED});
            call_text(gw, Era::Legacy, Some(&sid), tool, args).await;
        }
    };
    // Beta announces alpha's URI, then beta's tools change: only the change arrives.
    trigger("beta_trigger", "resource_updated").await;
    trigger("beta_trigger", "tools_list_changed").await;
    let next = next_message(&mut events).await;
    assert_eq!(next["method"], "notifications/tools/list_changed", "{next}");
    // Alpha, which serves it, is heard.
    trigger("alpha_trigger", "resource_updated").await;
    let next: Value = next_message(&mut events).await;
    assert_eq!(next["method"], "notifications/resources/updated", "{next}");
    assert_eq!(next["params"]["uri"], WATCHED);
    assert_eq!(
        next["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
}

/// A list change from a process the MRTR bridge started for one caller's call (a Modern call
/// of a per-session Legacy backend asking for its own log level gets one of its own) is that
/// call's alone: no gateway-served listen hears it. The sentinel: a resource update the
/// shared backend makes after it, which the listen hears first. Before, every caller's
/// listen heard the call's `tools/list_changed` (review LOW: it told everyone when another
/// caller's call ran).
#[tokio::test]
async fn a_list_change_of_one_callers_bridged_process_reaches_no_listen() {
    // beta first: it serves the watched URI; alpha is the per-session Legacy backend.
    let alpha = "    args: [fixture, --era, legacy]\n    isolation: per-session\n";
    let yaml = format!(
        "backends:\n{}  - name: alpha\n    command: {}\n{alpha}",
        stdio("beta", ""),
        super::SB
    );
    let served = serve("listen-bridged", &yaml, None).await;
    let gw = &served.gw;
    let notifications = json!({"toolsListChanged": true, "resourceSubscriptions": [WATCHED]});
    let resp = super::modern_listen(gw, notifications).await;
    let (mut events, ack) = acknowledged(resp).await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );

    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "alpha_trigger", "arguments": {"kind": "tools_list_changed"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": super::V,
                  "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
                  "io.modelcontextprotocol/logLevel": "info"}}});
    let headers = [
        ("mcp-protocol-version", super::V),
        ("mcp-method", "tools/call"),
        ("mcp-name", "alpha_trigger"),
    ];
    let r = gw.post_raw(None, call.to_string(), &headers).await;
    assert!(r.text.contains("\"result\""), "{}", r.text);

    let sid = gw.session().await;
    let args = json!({"kind": "resource_updated", "uri": WATCHED});
    call_text(gw, Era::Legacy, Some(&sid), "beta_trigger", args).await;
    let next = next_message(&mut events).await;
    assert_eq!(
        next["method"], "notifications/resources/updated",
        "the bridged call's list change reached the listen: {next}"
    );
}

/// A listen starts a warm process, as its caller, only on the per-session backends the
/// caller may use something of: the policy forbids alice everything of `alpha`, so her listen
/// starts one on `beta` alone. Once her own call's list change on that process reaches the
/// listen (it was registered there, after every start), one partition is live. Before, one was
/// started on every per-session backend, `alpha` included, handshaken as her (review LOW).
#[tokio::test]
async fn a_listen_starts_no_process_on_a_backend_its_caller_may_not_use() {
    const KEY: &str = "alice-listen-policy-key-0123456789";
    let dir = super::Dir::new("listen-policy-files");
    let policy = dir.write(
        "policy.cedar",
        "permit(principal, action, resource);\n\
         forbid(principal, action, resource)\n  \
         when { resource has backend && resource.backend == \"alpha\" };\n",
    );
    let legacy = "    args: [fixture, --era, legacy]\n    isolation: per-session\n";
    let entry = |name: &str| format!("  - name: {name}\n    command: {}\n{legacy}", super::SB);
    let yaml = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {KEY}}}\npolicy: {{file: {}}}\nbackends:\n{}{}",
        policy.display(),
        entry("alpha"),
        entry("beta")
    );
    let served = serve("listen-policy", &yaml, None).await;
    let gw = &served.gw;
    let notifications = json!({"toolsListChanged": true});
    let resp = super::listen_with(gw, notifications, json!({}), Some(KEY)).await;
    let (mut events, ack) = acknowledged(resp).await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let params = json!({"name": "beta_trigger", "arguments": {"kind": "tools_list_changed"}});
    let auth = format!("Bearer {KEY}");
    let r = super::modern(
        gw,
        json!(1),
        "tools/call",
        params,
        &[("authorization", &auth)],
    )
    .await;
    assert!(r.text.contains("\"result\""), "{}", r.text);
    let next = next_message(&mut events).await;
    assert_eq!(next["method"], "notifications/tools/list_changed", "{next}");
    let stats = crate::common::stats_as(gw, Some(KEY)).await;
    assert_eq!(
        stats["partitions"], 1,
        "a process was started on alpha: {stats}"
    );
}

/// A listen's event stream, past its first message (returned: its acknowledgement, which
/// each test asserts on).
async fn acknowledged(
    resp: reqwest::Response,
) -> (
    std::pin::Pin<Box<impl futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>>>>,
    Value,
) {
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ));
    let ack = next_message(&mut events).await;
    (events, ack)
}
