//! Sessions: per-client handshake, notifications, DELETE, expiry, health.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{tool_text, TestGateway};

#[tokio::test]
async fn each_client_gets_its_own_negotiated_version_and_session() {
    let gw = TestGateway::start(&[]).await;
    let (a, init_a) = gw.session_with_version("2025-06-18").await;
    let (b, init_b) = gw.session_with_version("2025-11-25").await;
    let (c, init_c) = gw.session_with_version("1999-01-01").await;
    assert_ne!(a, b);
    assert_eq!(init_a["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(init_b["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(
        init_c["result"]["protocolVersion"], "2025-11-25",
        "unknown versions get ours"
    );
    assert_eq!(init_a["id"], 0);
    for init in [&init_a, &init_b] {
        assert_eq!(init["result"]["serverInfo"]["name"], "switchboard-fixture");
        assert!(init["result"]["capabilities"]["tools"].is_object());
    }
    let _ = c;
}

#[tokio::test]
async fn notifications_get_202_and_no_body() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert!(r.text.is_empty());
}

#[tokio::test]
async fn delete_ends_the_session() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let other = gw.session().await;
    let r = gw
        .http
        .delete(&gw.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = gw
        .call_tool(Some(&sid), json!(44), "echo", json!({"text":"x"}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.error_code(), -32001);
    assert_eq!(r.json()["id"], 44);
    let r = gw
        .http
        .delete(&gw.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = gw.http.delete(&gw.url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Other sessions are untouched.
    let r = gw
        .call_tool(Some(&other), json!(1), "echo", json!({"text":"alive"}))
        .await;
    assert_eq!(tool_text(&r.json()), "alive");
}

#[tokio::test]
async fn idle_sessions_expire() {
    let gw = TestGateway::start(&["--session-ttl", "0.3"]).await;
    // Expiry is observable as 404. Each probe refreshes the TTL, so probes are spaced wider
    // than TTL + reaper tick; bounded by a deadline rather than one sleep-and-hope.
    let probe = gw.session().await;
    crate::common::until_session_gone(
        &gw,
        &probe,
        std::time::Duration::from_millis(400),
        "session never expired",
    )
    .await;
}

#[tokio::test]
async fn healthz() {
    let gw = TestGateway::start(&[]).await;
    let r = gw
        .http
        .get(format!("{}/healthz", gw.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
