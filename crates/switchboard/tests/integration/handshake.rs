//! The gateway handshakes with a shared backend once, and answers backend-initiated traffic
//! itself in shared mode.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, TestGateway};

#[tokio::test]
async fn a_strict_backend_sees_one_initialize_however_many_clients_connect() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/strict.py"
    );
    let gw = TestGateway::start_with(&[], &["python3", script]).await;
    let mut sessions = Vec::new();
    for _ in 0..5 {
        // Each session_with_version also posts notifications/initialized.
        let (sid, init) = gw.session_with_version("2025-11-25").await;
        assert_eq!(init["result"]["serverInfo"]["name"], "strict");
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
        sessions.push(sid);
    }
    let r = gw
        .call_tool(Some(&sessions[4]), json!(1), "stats", json!({}))
        .await;
    let stats: Value = serde_json::from_str(tool_text(&r.json())).unwrap();
    assert_eq!(stats, json!({"initialize": 1, "initialized": 1}));
}

/// Backend `ping` is answered by the gateway; sampling, elicitation and roots requests get
/// -32601 back (shared mode cannot attribute them); the fixture reports what it received.
#[tokio::test]
async fn backend_requests_are_answered_by_the_gateway() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let answer = |r: &crate::common::Reply| -> Value {
        let v = r.json();
        v["result"]["structuredContent"]["answer"].clone()
    };
    let r = gw
        .call_tool(Some(&sid), json!(1), "trigger", json!({"kind":"ping"}))
        .await;
    let a = answer(&r);
    assert_eq!(a["result"], json!({}), "{a}");
    for kind in ["sampling", "elicitation", "roots"] {
        let r = gw
            .call_tool(Some(&sid), json!(kind), "trigger", json!({"kind": kind}))
            .await;
        let a = answer(&r);
        assert_eq!(a["error"]["code"], -32601, "{kind}: {a}");
    }
}

/// Notifications the gateway cannot attribute are not delivered: on an SSE response stream the
/// trigger's notification is written before its result, so if it were delivered it would
/// arrive before the result (the sentinel). The stream holds exactly the result.
#[tokio::test]
async fn unattributable_notifications_are_not_delivered() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    for kind in [
        "log",
        "unknown_notification",
        "tools_list_changed",
        "resource_updated",
        "stray_response",
    ] {
        let body = json!({"jsonrpc":"2.0","id":kind,"method":"tools/call","params":{"name":"trigger","arguments":{"kind":kind}}});
        let r = gw
            .post_raw(
                Some(&sid),
                body.to_string(),
                &[("accept", "text/event-stream, application/json;q=0.5")],
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
        let msgs = r.messages();
        assert_eq!(msgs.len(), 1, "{kind}: {msgs:?}");
        assert_eq!(msgs[0]["id"], kind);
        assert!(msgs[0]["result"].is_object(), "{kind}: {}", msgs[0]);
    }
}
