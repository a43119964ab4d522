//! Server→client traffic of a remote: its requests (sampling, elicitation), logs and progress
//! reach the client session whose upstream session produced them, and no other. Non-delivery
//! is proven by order: the other session's own sentinel notification arrives, and nothing of
//! the first session's came before it.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{call, gateway, listen, next, next_within, open_call, open_session, Events};
use crate::common::{tool_text, TestGateway};
use crate::fixture_http::FixtureHttp;

fn trigger(id: Value, kind: &str) -> Value {
    call(id, "trigger", json!({"kind": kind}))
}

/// Holds two requests open on `sid` until dropped. The gateway puts a session-wide message on
/// the session's one in-flight request's stream when there is exactly one, else on the listen
/// stream; with two held, a sentinel always takes the listen stream, whether it arrives before
/// or after the answer of the request that triggered it. The first progress note of each
/// proves it is in flight.
async fn hold(gw: &TestGateway, sid: &str) -> [Events; 2] {
    let body = |n: u32| {
        json!({"jsonrpc": "2.0", "id": format!("hold-{n}"), "method": "tools/call", "params": {
        "name": "progress", "arguments": {"steps": 100_000, "intervalMs": 50},
        "_meta": {"progressToken": format!("hold-{n}")}}})
    };
    let mut held = [
        open_call(gw, sid, body(1)).await,
        open_call(gw, sid, body(2)).await,
    ];
    for events in &mut held {
        assert_eq!(next(events).await["method"], "notifications/progress");
    }
    held
}

/// Makes sure the session's listen stream is live end to end (the gateway may open its own
/// listen stream at the remote only after ours): triggers `tools_list_changed` until one
/// arrives. Later `tools_list_changed` events are leftovers of this, and skipped by readers.
async fn prime(gw: &TestGateway, sid: &str, events: &mut Events) {
    let _held = hold(gw, sid).await;
    for attempt in 0..20 {
        let id = json!(format!("prime-{attempt}"));
        let r = gw.post(Some(sid), &trigger(id, "tools_list_changed")).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        if let Some(m) = next_within(events, Duration::from_millis(500)).await {
            assert_eq!(m["method"], "notifications/tools/list_changed", "{m}");
            return;
        }
    }
    panic!("the session's listen stream never carried its own remote's notification");
}

/// Everything on `events` up to the session's own sentinel, a `<kind>` list change (`kind`
/// differs per session, in case the gateway passes list changes to every session). Other
/// list changes (priming leftovers, other sessions' sentinels) are skipped: payload-free.
async fn until_sentinel(
    gw: &TestGateway,
    sid: &str,
    events: &mut Events,
    kind: &str,
) -> Vec<Value> {
    let _held = hold(gw, sid).await;
    let sentinel = trigger(json!("sentinel"), &format!("{kind}_list_changed"));
    let r = gw.post(Some(sid), &sentinel).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let wanted = format!("notifications/{kind}/list_changed");
    let mut before = Vec::new();
    loop {
        let m = next(events).await;
        let method = m["method"].as_str().unwrap_or_default();
        if method == wanted {
            return before;
        }
        if !method.ends_with("/list_changed") {
            before.push(m);
        }
    }
}

/// Runs a server request of `kind` on `a` to its end: `b` tries to answer it first (refused or
/// ignored), then `a` answers with `answer`; returns the tool's report.
async fn server_request(gw: &TestGateway, a: &str, b: &str, kind: &str, answer: Value) -> Value {
    let mut stream = open_call(gw, a, trigger(json!(1), kind)).await;
    let request = next(&mut stream).await;
    let expected = if kind == "sampling" {
        "sampling/createMessage"
    } else {
        "elicitation/create"
    };
    assert_eq!(request["method"], expected, "{request}");
    let forged = json!({"jsonrpc": "2.0", "id": request["id"], "result": {
        "role": "assistant", "model": "m", "action": "accept",
        "content": {"type": "text", "text": "forged-by-b"}}});
    let r = gw.post(Some(b), &forged).await;
    assert_ne!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.text);
    let mine = json!({"jsonrpc": "2.0", "id": request["id"], "result": answer});
    assert_eq!(gw.post(Some(a), &mine).await.status, StatusCode::ACCEPTED);
    let done = next(&mut stream).await;
    assert_eq!(done["id"], 1, "{done}");
    let report: Value = serde_json::from_str(tool_text(&done)).unwrap();
    assert!(
        !report.to_string().contains("forged-by-b"),
        "B's answer reached A's remote: {report}"
    );
    report
}

#[tokio::test]
async fn server_requests_and_logs_reach_only_the_session_that_caused_them() {
    let fx = FixtureHttp::start(&[]).await;
    let gw = gateway(&fx.url, &[]).await;
    let caps = json!({"sampling": {}, "elicitation": {}});
    let a = open_session(&gw, None, caps.clone()).await;
    let b = open_session(&gw, None, caps).await;
    let (mut la, mut lb) = (listen(&gw, &a).await, listen(&gw, &b).await);
    prime(&gw, &a, &mut la).await;
    prime(&gw, &b, &mut lb).await;

    let sampled = json!({"role": "assistant", "model": "m",
                         "content": {"type": "text", "text": "sampled-by-a"}});
    let report = server_request(&gw, &a, &b, "sampling", sampled).await;
    assert_eq!(
        report["answer"]["result"]["content"]["text"], "sampled-by-a",
        "{report}"
    );
    let elicited = json!({"action": "accept", "content": {"ok": true}});
    let report = server_request(&gw, &a, &b, "elicitation", elicited).await;
    assert_eq!(report["answer"]["result"]["action"], "accept", "{report}");

    // A log of A's remote reaches A: on the request's stream, or else on A's listen stream.
    let r = gw.post(Some(&a), &trigger(json!(2), "log")).await;
    let on_request = r.messages();
    assert_eq!(on_request.last().unwrap()["id"], 2, "{}", r.text);
    let logged = |m: &Value| {
        m["method"] == "notifications/message" && m["params"]["data"] == "trigger log message"
    };
    let mut a_listen = until_sentinel(&gw, &a, &mut la, "prompts").await;
    let a_got_log = on_request.iter().any(logged) || a_listen.iter().any(logged);
    assert!(
        a_got_log,
        "A's log went nowhere: {on_request:?} {a_listen:?}"
    );
    a_listen.retain(|m| !logged(m));
    assert!(
        a_listen.is_empty(),
        "unexpected on A's listen stream: {a_listen:?}"
    );

    // B received nothing of A's, on its listen stream: its own sentinel came first.
    let b_listen = until_sentinel(&gw, &b, &mut lb, "resources").await;
    assert!(b_listen.is_empty(), "A's traffic reached B: {b_listen:?}");
}

/// Two sessions use the same progress token at once; each gets exactly its own call's notes.
#[tokio::test]
async fn progress_with_the_same_token_stays_with_its_session() {
    let fx = FixtureHttp::start(&[]).await;
    let gw = gateway(&fx.url, &[]).await;
    let a = open_session(&gw, None, json!({})).await;
    let b = open_session(&gw, None, json!({})).await;
    let body = |steps: u64| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "progress", "arguments": {"steps": steps, "intervalMs": 20},
            "_meta": {"progressToken": "same-token"}}})
    };
    let (two, five) = (body(2), body(5));
    let (ra, rb) = tokio::join!(gw.post(Some(&a), &two), gw.post(Some(&b), &five));
    for (reply, steps) in [(ra, 2u64), (rb, 5)] {
        let msgs = reply.messages();
        let (done, notes) = msgs.split_last().unwrap();
        assert_eq!(done["id"], 7);
        assert_eq!(tool_text(done), "done");
        assert_eq!(notes.len() as u64, steps, "{notes:?}");
        for (i, n) in notes.iter().enumerate() {
            assert_eq!(n["method"], "notifications/progress");
            assert_eq!(
                n["params"]["progressToken"], "same-token",
                "the client's own token"
            );
            assert_eq!(n["params"]["total"], steps, "another session's note: {n}");
            assert_eq!(n["params"]["progress"], i as u64 + 1);
        }
    }
}
