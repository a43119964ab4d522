//! Remotes that misbehave (hand-written on raw sockets, `raw`): every client request still gets
//! one clear, bounded answer, and the gateway keeps serving. Also what the gateway sends them:
//! its configured outgoing headers, never the client's own credentials.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::raw::{Fault, RawRemote, HOSTILE_CLIENT};
use super::{assert_failure, call, gateway, keys_file, open_session, post_as, Failure, ALICE};
use crate::common::TestGateway;

/// Fails the test instead of hanging it.
const AT_MOST: Duration = Duration::from_secs(30);

/// Streamable HTTP named explicitly: autodetection would try HTTP+SSE on a 4xx, which these
/// servers do not speak.
async fn gateway_for(remote: &RawRemote, args: &[&str]) -> TestGateway {
    let mut all = vec!["--transport", "streamable"];
    all.extend_from_slice(args);
    gateway(&remote.url, &all).await
}

#[tokio::test]
async fn an_html_answer_to_initialize_is_a_clear_error_and_the_gateway_keeps_serving() {
    let remote = RawRemote::start(Fault::HtmlToClientInitialize).await;
    let gw = gateway_for(&remote, &[]).await;
    let init = json!({"jsonrpc": "2.0", "id": "init-1", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": HOSTILE_CLIENT, "version": "0"}}});
    let r = tokio::time::timeout(AT_MOST, gw.post(None, &init))
        .await
        .expect("initialize answered with HTML by the remote was never answered");
    assert_failure(&r, Failure::BadGateway, json!("init-1"));
    assert!(
        r.headers.get("mcp-session-id").is_none(),
        "no session from a failed handshake"
    );
    assert!(
        !r.text.contains("Please sign in"),
        "the remote's page is not relayed: {}",
        r.text
    );
    // Another client's handshake (not answered with HTML) works on the same gateway.
    let sid = open_session(&gw, None, json!({})).await;
    let r = gw
        .post(Some(&sid), &call(json!(1), "work", json!({})))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn a_stream_that_never_answers_is_cut_by_the_request_timeout() {
    let remote = RawRemote::start(Fault::EndlessStreamForCalls).await;
    let gw = gateway_for(&remote, &["--request-timeout", "1"]).await;
    let sid = open_session(&gw, None, json!({})).await;
    let started = Instant::now();
    let r = tokio::time::timeout(
        AT_MOST,
        gw.post(Some(&sid), &call(json!(5), "work", json!({}))),
    )
    .await
    .expect("a call on an endless stream was never answered");
    let took = started.elapsed();
    assert_failure(&r, Failure::Timeout, json!(5));
    assert!(
        took < Duration::from_secs(5),
        "504 only after {took:?} with a 1 s timeout"
    );
    // The gateway lets go of the stream it gave up on (it would otherwise run for ever).
    let mut closed = remote.endless_closed.clone();
    tokio::time::timeout(Duration::from_secs(5), closed.wait_for(|n| *n >= 1))
        .await
        .expect("the gateway kept reading the endless stream after its 504")
        .unwrap();
    let cancelled = remote
        .seen
        .lock()
        .iter()
        .any(|s| s.body["method"] == "notifications/cancelled");
    eprintln!(
        "endless stream: 504 after {took:?}; notifications/cancelled sent upstream: {cancelled}"
    );
    // The session is still usable.
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn an_answer_over_the_size_bound_is_a_clear_bad_gateway() {
    let remote = RawRemote::start(Fault::HugeAnswerToCalls).await;
    let gw = gateway_for(&remote, &[]).await;
    let sid = open_session(&gw, None, json!({})).await;
    let r = tokio::time::timeout(
        AT_MOST,
        gw.post(Some(&sid), &call(json!(9), "work", json!({}))),
    )
    .await
    .expect("a call answered with an oversized message was never answered");
    assert_failure(&r, Failure::BadGateway, json!(9));
    assert!(
        r.text.len() < 64 * 1024,
        "the oversized answer was relayed ({} bytes)",
        r.text.len()
    );
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// `--header 'Name: ${VAR}'` is expanded from the gateway's environment and sent on every
/// request to the remote; the client's own bearer credential never is.
#[tokio::test]
async fn configured_headers_reach_the_remote_and_client_credentials_do_not() {
    let remote = RawRemote::start(Fault::Polite).await;
    let keys = keys_file();
    let args = [
        "--url",
        &remote.url,
        "--transport",
        "streamable",
        "--api-keys-file",
        &keys,
        "--header",
        "X-Upstream-Token: ${UPSTREAM_TOKEN}",
    ];
    let gw = TestGateway::start_env(&args, &[], &[("UPSTREAM_TOKEN", "s3cret-upstream")]).await;
    let sid = open_session(&gw, Some(ALICE), json!({})).await;
    let r = post_as(
        &gw,
        Some(ALICE),
        Some(&sid),
        &call(json!(1), "work", json!({})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let methods = remote.methods();
    for expected in ["initialize", "notifications/initialized", "tools/call"] {
        assert!(
            methods.iter().any(|m| m == expected),
            "{expected} never reached the remote: {methods:?}"
        );
    }
    for seen in remote.seen.lock().iter() {
        let token = seen.headers.iter().find(|(k, _)| k == "x-upstream-token");
        assert_eq!(
            token.map(|(_, v)| v.as_str()),
            Some("s3cret-upstream"),
            "{} {} without the expanded header",
            seen.method,
            seen.body
        );
        for (name, value) in &seen.headers {
            assert!(
                !value.contains(ALICE),
                "the client's key reached the remote in {name}"
            );
        }
    }
    assert!(
        !gw.stderr.lock().contains("s3cret-upstream"),
        "the outgoing credential was logged"
    );
}
