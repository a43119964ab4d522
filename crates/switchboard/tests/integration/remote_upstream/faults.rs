//! The remote goes away: pending calls are answered at once, a restarted remote's lost session
//! ends the client's session cleanly, and what `/healthz` says meanwhile.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{
    assert_error, assert_failure, call, gateway, instance_of, next, open_call, open_session,
    Failure,
};
use crate::common::{Reply, TestGateway};
use crate::fixture_http::FixtureHttp;

/// How soon after the remote dies every pending request must have its answer.
const PROMPTLY: Duration = Duration::from_secs(1);
/// A generous bound that fails the test instead of letting it hang.
const AT_MOST: Duration = Duration::from_secs(10);

/// A port that was free a moment ago (bound to 127.0.0.1:0, then released), so the remote
/// can be restarted on the same address.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_killed_remote_fails_every_pending_call_within_a_second() {
    let mut fx = FixtureHttp::start_at(free_port(), &[]).await;
    let gw = gateway(&fx.url, &[]).await;
    let a = open_session(&gw, None, json!({})).await;
    let b = open_session(&gw, None, json!({})).await;
    // A: a plain call that would answer in a minute (its answer will be JSON: nothing before).
    let slow = tokio::spawn({
        let (url, http, a) = (gw.url.clone(), gw.http.clone(), a.clone());
        async move {
            let body = call(json!(11), "slow", json!({"ms": 60_000}));
            post_at(&http, &url, &a, &body).await
        }
    });
    // B: a call whose first progress note proves it is running at the remote.
    let body = json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {
        "name": "progress", "arguments": {"steps": 10_000, "intervalMs": 100},
        "_meta": {"progressToken": "p"}}});
    let mut streamed = open_call(&gw, &b, body).await;
    assert_eq!(
        next(&mut streamed).await["method"],
        "notifications/progress"
    );

    fx.kill().await;
    let killed = Instant::now();
    let a_answer = tokio::time::timeout(AT_MOST, slow)
        .await
        .expect("the pending plain call was never answered")
        .unwrap();
    let a_after = killed.elapsed();
    assert_failure(&a_answer, Failure::BadGateway, json!(11));
    let b_answer = tokio::time::timeout(AT_MOST, async {
        loop {
            let m = next(&mut streamed).await;
            if m["method"] != "notifications/progress" {
                return m;
            }
        }
    })
    .await
    .expect("the pending streamed call was never answered");
    let b_after = killed.elapsed();
    assert_error(&b_answer, Failure::BadGateway, &json!(12));
    assert!(
        a_after <= PROMPTLY,
        "plain call answered {a_after:?} after the kill"
    );
    assert!(
        b_after <= PROMPTLY,
        "streamed call answered {b_after:?} after the kill"
    );
}

async fn post_at(http: &reqwest::Client, url: &str, session: &str, body: &Value) -> Reply {
    let resp = http
        .post(url)
        .header("accept", crate::common::BOTH)
        .header("content-type", "application/json")
        .header("mcp-session-id", session)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let text = resp.text().await.unwrap();
    Reply {
        status,
        headers,
        text,
    }
}

async fn echo(gw: &TestGateway, session: &str, id: u64) -> Reply {
    let r = tokio::time::timeout(
        AT_MOST,
        gw.post(
            Some(session),
            &call(json!(id), "echo", json!({"text": "e"})),
        ),
    )
    .await;
    r.expect("no answer within 10s")
}

#[tokio::test]
async fn a_restarted_remote_ends_the_session_and_a_fresh_one_works() {
    let port = free_port();
    let mut fx = FixtureHttp::start_at(port, &[]).await;
    let gw = gateway(&fx.url, &[]).await;
    let a = open_session(&gw, None, json!({})).await;
    assert_eq!(echo(&gw, &a, 1).await.status, StatusCode::OK);

    fx.kill().await;
    // While it is down: an error at once, never a hang.
    assert_failure(&echo(&gw, &a, 2).await, Failure::BadGateway, json!(2));

    let fx = FixtureHttp::start_at(port, &[]).await;
    // The new remote does not know the upstream session (404 there): the client's session is
    // ended, so its next request (at the latest the one after the request that found out)
    // gets 404 and the client re-initializes. Nothing in between may succeed.
    let first = echo(&gw, &a, 3).await;
    let gone = if first.status == StatusCode::NOT_FOUND {
        first
    } else {
        assert!(first.json()["error"].is_object(), "{}", first.text);
        echo(&gw, &a, 4).await
    };
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);
    assert_eq!(gone.error_code(), -32001);

    let fresh = open_session(&gw, None, json!({})).await;
    assert_eq!(echo(&gw, &fresh, 5).await.status, StatusCode::OK);
    let instance = instance_of(&gw, None, &fresh).await;
    fx.announced_when("the fresh session at the restarted remote", |s| {
        s.session_of(&instance).is_some()
    })
    .await;
}

async fn healthz(gw: &TestGateway) -> (StatusCode, String) {
    let r = gw
        .http
        .get(format!("{}/healthz", gw.base()))
        .timeout(AT_MOST)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

/// `/healthz` reflects the remote's reachability as last seen by any upstream session
/// (`upstream::remote`: cleared when an exchange fails below HTTP, set again by any answer):
/// 200 while up, 503 once a request found it down, 200 once a request got an answer again.
/// Before any request notices, it still says what was last seen (printed, not asserted).
#[tokio::test]
async fn healthz_while_the_remote_is_up_down_and_back() {
    let port = free_port();
    let mut fx = FixtureHttp::start_at(port, &[]).await;
    let gw = gateway(&fx.url, &[]).await;
    let up = healthz(&gw).await;
    assert_eq!(up.0, StatusCode::OK, "{up:?}");

    fx.kill().await;
    let down_before_use = healthz(&gw).await;
    // A request that finds the remote gone (the gateway may notice only then).
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "remote-it", "version": "0"}}});
    let failed = tokio::time::timeout(AT_MOST, gw.post(None, &init))
        .await
        .expect("initialize with the remote down was never answered");
    assert!(
        failed.status.is_server_error(),
        "{} {}",
        failed.status,
        failed.text
    );
    let down_after_use = healthz(&gw).await;
    assert_eq!(
        down_after_use.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "{down_after_use:?}"
    );

    let _fx = FixtureHttp::start_at(port, &[]).await;
    let back_before_use = healthz(&gw).await;
    let s = open_session(&gw, None, json!({})).await;
    assert_eq!(echo(&gw, &s, 1).await.status, StatusCode::OK);
    let back_after_use = healthz(&gw).await;
    assert_eq!(back_after_use.0, StatusCode::OK, "{back_after_use:?}");
    eprintln!(
        "healthz: up {up:?}; down {down_before_use:?}, after a failed request \
         {down_after_use:?} (initialize got {} {}); back {back_before_use:?}, after a \
         request {back_after_use:?}",
        failed.status, failed.text
    );
}

/// Progress restarts `--request-timeout` (up to `--max-request-time`): a call that reports
/// progress more often than the timeout may run longer than it. Checked against a stdio
/// per-session backend first (the control: same gateway flags, same tool), then a remote.
#[tokio::test]
async fn progress_keeps_a_remote_call_alive_past_the_request_timeout() {
    let fx = FixtureHttp::start(&[]).await;
    let flags = ["--request-timeout", "1"];
    let stdio = {
        let mut args = vec!["--isolation", "per-session"];
        args.extend(flags);
        TestGateway::start(&args).await
    };
    let remote = gateway(&fx.url, &flags).await;
    // Six notes 400 ms apart: 2.4 s in all, never 1 s without progress.
    let body = json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {
        "name": "progress", "arguments": {"steps": 6, "intervalMs": 400},
        "_meta": {"progressToken": "alive"}}});
    for (what, gw) in [("stdio per-session", &stdio), ("remote", &remote)] {
        let sid = open_session(gw, None, json!({})).await;
        let r = tokio::time::timeout(AT_MOST, gw.post(Some(&sid), &body))
            .await
            .expect("no answer within 10s");
        let done = r.messages().pop().unwrap();
        assert_eq!(done["id"], 21, "{what}: {done}");
        assert_eq!(
            done["result"]["content"][0]["text"], "done",
            "{what}: cut despite progress: {done}"
        );
    }
}
