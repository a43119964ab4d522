//! The product's defining property: a response reaches exactly the caller that owns it.

use std::sync::Arc;

use futures::stream::{self, StreamExt};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, TestGateway};

const SESSIONS: usize = 16;
const REQUESTS: u64 = 500;
/// In flight per session at once, so the backend holds many colliding ids concurrently.
const IN_FLIGHT: usize = 16;

/// 16 sessions each send ids 1..=500 (the same ids in every session) with payloads naming the
/// session and the request; the backend answers out of order (random delays). Every answer must
/// carry its own id and its own payload, and every request must be answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_sessions_with_colliding_ids_never_cross() {
    let gw = Arc::new(TestGateway::start(&[]).await);
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(gw.session().await);
    }
    let tasks = sessions.into_iter().enumerate().map(|(s, sid)| {
        let gw = gw.clone();
        tokio::spawn(async move {
            let answered = stream::iter(1..=REQUESTS)
                .map(|i| {
                    let (gw, sid) = (gw.clone(), sid.clone());
                    async move {
                        let text = format!("session-{s}-request-{i}");
                        let delay = (i * 7 + s as u64 * 13) % 4;
                        let reply = gw
                            .call_tool(
                                Some(&sid),
                                json!(i),
                                "echo",
                                json!({"text": text, "delayMs": delay}),
                            )
                            .await;
                        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
                        let v = reply.json();
                        assert_eq!(v["id"], json!(i), "id crossed: {v}");
                        assert_eq!(tool_text(&v), text, "payload crossed into session {s}");
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .count()
                .await;
            assert_eq!(answered as u64, REQUESTS);
        })
    });
    for t in futures::future::join_all(tasks).await {
        t.unwrap();
    }
}

/// Requests without a session each get their own route key: two concurrent sessionless calls
/// with the same id, answered in reverse order, each get their own payload.
#[tokio::test]
async fn sessionless_requests_with_the_same_id_stay_apart() {
    let gw = TestGateway::start(&[]).await;
    let slow = gw.call_tool(None, json!(1), "echo", json!({"text":"slow","delayMs":300}));
    let fast = gw.call_tool(None, json!(1), "echo", json!({"text":"fast"}));
    let (slow, fast) = tokio::join!(slow, fast);
    assert_eq!(tool_text(&slow.json()), "slow");
    assert_eq!(tool_text(&fast.json()), "fast");
}

/// A client whose string id is spelled like a route key gets it back as its own id; the key
/// is payload, never a routing decision, and the other session's call is unaffected.
#[tokio::test]
async fn route_key_shaped_ids_are_just_ids() {
    let gw = TestGateway::start(&[]).await;
    let a = gw.session().await;
    let b = gw.session().await;
    let victim = gw.call_tool(
        Some(&a),
        json!(1),
        "echo",
        json!({"text":"victim-secret","delayMs":300}),
    );
    let forger = async {
        // Whatever key the victim's call got, the forger cannot name it: try several shapes.
        let mut seen = Vec::new();
        for id in ["sb-00000000000000000000000000000000", "sb-", "1"] {
            let r = gw
                .call_tool(Some(&b), json!(id), "echo", json!({"text":"mine"}))
                .await;
            seen.push(r.json());
        }
        seen
    };
    let (victim, seen) = tokio::join!(victim, forger);
    assert_eq!(tool_text(&victim.json()), "victim-secret");
    for (v, id) in seen
        .iter()
        .zip(["sb-00000000000000000000000000000000", "sb-", "1"])
    {
        assert_eq!(v["id"], json!(id));
        assert_eq!(tool_text(v), "mine");
    }
}

/// SSE delivery carries the same single answer, as an `event: message` frame.
#[tokio::test]
async fn sse_delivery_when_the_client_prefers_it() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let body = json!({"jsonrpc":"2.0","id":"s1","method":"tools/call","params":{"name":"echo","arguments":{"text":"via sse"}}});
    let r = gw
        .post_raw(
            Some(&sid),
            body.to_string(),
            &[("accept", "text/event-stream, application/json;q=0.5")],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.content_type().starts_with("text/event-stream"),
        "{}",
        r.content_type()
    );
    assert!(r.text.contains("event: message\n"), "{}", r.text);
    let v: Value = r.json();
    assert_eq!(v["id"], "s1");
    assert_eq!(tool_text(&v), "via sse");
}
