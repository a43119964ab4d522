//! Failures around the shared store: a replica `kill -9`ed mid-run, and Redis itself killed.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::client::{kill_9, replica, tool_calls, Endpoint};
use super::proxy::{addr_of, Proxy};
use super::redis::Redis;
use crate::common::{tool_text, Reply};
use crate::vmcp::driver::Client;

/// Generous bound on any one answer while the store is down: it must answer, not hang. A
/// liveness bound, not a latency claim.
const ANSWERS_WITHIN: Duration = Duration::from_secs(10);

async fn within<F: std::future::Future<Output = Reply>>(what: &str, f: F) -> Reply {
    tokio::time::timeout(ANSWERS_WITHIN, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {ANSWERS_WITHIN:?}"))
}

/// The three real clients that a restart strands today (issue 16): rmcp, the Python SDK 1.x
/// and the TypeScript SDK 1.x, each with one Legacy session over Streamable HTTP at `url`.
async fn sdk_clients(url: &str) -> Vec<(&'static str, Client)> {
    vec![
        ("rmcp", Client::rmcp(url, false).await),
        ("python", Client::python_legacy(url).await),
        ("typescript", Client::typescript(url).await),
    ]
}

/// Each client's `echo` answers its own text (`{name} {when}`).
async fn sdk_echo(clients: &mut [(&'static str, Client)], when: &str) {
    for (name, client) in clients.iter_mut() {
        let want = format!("{name} {when}");
        match client.call("echo", json!({ "text": want })).await {
            Ok(text) => assert_eq!(text, want),
            Err(e) => panic!("{want}: the {name} client failed: {e:?}"),
        }
    }
}

/// Each of `sessions` answers its own `echo` through `ep`.
async fn echo_all(ep: &Endpoint, sessions: &[String], when: &str) {
    for (n, sid) in sessions.iter().enumerate() {
        let want = format!("session {n} {when}");
        let r = ep.echo(sid, json!(n), &want).await;
        assert_eq!(r.status, StatusCode::OK, "{want}: {}", r.text);
        assert_eq!(tool_text(&r.json()), want);
    }
}

#[tokio::test]
async fn a_replica_killed_mid_run_loses_no_session() {
    let Some(redis) = Redis::start_or_skip("a_replica_killed").await else {
        return;
    };
    let (a, b) = tokio::join!(replica(&redis, &[]), replica(&redis, &[]));
    // Only A in rotation while the sessions open: every one of them is created on A.
    let proxy = Proxy::start(vec![addr_of(&a.url)]).await;
    let lb = Endpoint::new(&proxy.url());
    let mut sessions = Vec::new();
    for _ in 0..4 {
        sessions.push(lb.session().await);
    }
    echo_all(&lb, &sessions, "on A").await;
    let mut clients = sdk_clients(&proxy.url()).await;
    sdk_echo(&mut clients, "on A").await;
    assert_eq!(tool_calls(&b).await, 0.0, "B has served nothing yet");

    proxy.set_upstreams(vec![addr_of(&a.url), addr_of(&b.url)]);
    kill_9(&a).await;
    // Every connection to A died with it; the next requests reconnect through the proxy,
    // which skips the dead A.
    echo_all(&lb, &sessions, "after A died").await;
    sdk_echo(&mut clients, "after A died").await;
    assert_eq!(
        tool_calls(&b).await,
        (sessions.len() + clients.len()) as f64,
        "B served every call after A died"
    );

    // A comes back (a new process, same Redis) and serves the same sessions again.
    let a2 = replica(&redis, &[]).await;
    echo_all(&Endpoint::of(&a2), &sessions, "on A again").await;
    assert_eq!(tool_calls(&a2).await, sessions.len() as f64);
    proxy.set_upstreams(vec![addr_of(&a2.url), addr_of(&b.url)]);
    echo_all(&lb, &sessions, "behind the proxy again").await;
    sdk_echo(&mut clients, "with A back").await;
}

/// The refusal of a new session while the store is down: 503 with a JSON-RPC internal error
/// that names the session store.
fn assert_store_refusal(r: &Reply) {
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    let msg = r.json();
    assert_eq!(msg["error"]["code"], json!(-32603), "{msg}");
    let text = msg["error"]["message"].as_str().unwrap_or_default();
    assert!(
        text.to_lowercase().contains("session store"),
        "the message names the session store: {msg}"
    );
    assert!(r.headers.get("mcp-session-id").is_none(), "no session made");
}

#[tokio::test]
async fn redis_down_keeps_held_sessions_and_refuses_new_ones_until_it_returns() {
    let Some(mut redis) = Redis::start_or_skip("redis_down").await else {
        return;
    };
    let gw = replica(&redis, &[]).await;
    let ep = Endpoint::of(&gw);
    let held = ep.session().await;
    assert_eq!(
        tool_text(&ep.echo(&held, json!(1), "up").await.json()),
        "up"
    );

    redis.kill().await;
    for n in 0..3 {
        let want = format!("held {n} with redis down");
        let r = within(&want, ep.echo(&held, json!(n), &want)).await;
        assert_eq!(r.status, StatusCode::OK, "{want}: {}", r.text);
        assert_eq!(tool_text(&r.json()), want);
        // Asked more than once: a reconnect in backoff refuses as promptly as the first try.
        assert_store_refusal(&within("initialize with redis down", ep.initialize()).await);
    }

    redis.restart().await;
    // The client retries (as a client refused with 503 would); the gateway reconnects with
    // backoff, so the first tries may still be refused, each promptly.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let fresh = loop {
        let r = within("initialize after redis returned", ep.initialize()).await;
        if r.status == StatusCode::OK {
            break r.headers["mcp-session-id"].to_str().unwrap().to_owned();
        }
        assert_store_refusal(&r);
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new session within 30 s of Redis returning"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ep.initialized(&fresh).await;
    let r = ep.echo(&fresh, json!(1), "fresh").await;
    assert_eq!(tool_text(&r.json()), "fresh");
    assert!(redis.dbsize().await > 0, "the new session lives in Redis");
    // Redis came back empty (nothing persisted): the session this replica held through the
    // outage is still its, not lost with the store's contents.
    let r = ep.echo(&held, json!(2), "held after").await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "held session after Redis returned empty: {}",
        r.text
    );
    assert_eq!(tool_text(&r.json()), "held after");
}
