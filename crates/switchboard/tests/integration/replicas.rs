//! Two gateway processes on one real Redis (issue 16): any replica serves any Legacy session,
//! with the same owner check, and neither a killed replica nor a Redis outage loses a session
//! or hangs a client. Each replica fronts its own shared stdio fixture; the balancer is the
//! test's round-robin TCP proxy (`proxy.rs`); Redis is one this test started (`redis.rs`).

pub(crate) mod client;
mod failover;
mod forged;
mod home;
mod modern;
mod oversized;
mod policy;
mod proxy;
pub(crate) mod redis;
mod sse_records;
mod tasks;

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::json;

use crate::common::tool_text;
use client::{replica, tool_calls, without_id, Endpoint};
use proxy::{addr_of, Proxy};
use redis::Redis;

const SESSIONS: usize = 16;
const ROUNDS: usize = 4;
/// Every call uses this JSON-RPC id: ids collide across sessions on purpose.
const ID: i64 = 7;

/// What went wrong with one answer, if anything (None: its own text and id came back).
fn misdelivery(answer: &crate::common::Reply, want: &str) -> Option<String> {
    if answer.status != StatusCode::OK {
        return Some(format!("{want}: HTTP {} {}", answer.status, answer.text));
    }
    let msgs = answer.messages();
    let [msg] = msgs.as_slice() else {
        return Some(format!(
            "{want}: {} messages in {}",
            msgs.len(),
            answer.text
        ));
    };
    let text = msg["result"]["content"][0]["text"].as_str();
    (text != Some(want) || msg["id"] != json!(ID)).then(|| format!("{want}: got {msg}"))
}

#[tokio::test]
async fn sixteen_sessions_across_two_replicas_never_cross() {
    let Some(redis) = Redis::start_or_skip("sixteen_sessions").await else {
        return;
    };
    let (a, b) = tokio::join!(replica(&redis, &[]), replica(&redis, &[]));
    let proxy = Proxy::start(vec![addr_of(&a.url), addr_of(&b.url)]).await;
    let lb = Endpoint::new(&proxy.url());
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(lb.session().await);
    }
    let before = (tool_calls(&a).await, tool_calls(&b).await);

    let mut wrong = Vec::new();
    for round in 0..ROUNDS {
        let calls = sessions.iter().enumerate().map(|(n, sid)| {
            let lb = &lb;
            async move {
                let want = format!("session {n} round {round} of {sid}");
                let answer = lb.echo(sid, json!(ID), &want).await;
                misdelivery(&answer, &want)
            }
        });
        wrong.extend(join_all(calls).await.into_iter().flatten());
    }
    assert!(wrong.is_empty(), "cross-deliveries or failures: {wrong:#?}");

    let after = (tool_calls(&a).await, tool_calls(&b).await);
    let served = (after.0 - before.0, after.1 - before.1);
    assert!(
        served.0 > 0.0 && served.1 > 0.0,
        "both replicas served calls: {served:?}"
    );
    assert_eq!(
        served.0 + served.1,
        (SESSIONS * ROUNDS) as f64,
        "every call counted exactly once, on one replica: {served:?}"
    );
    assert!(proxy.served(addr_of(&a.url)) > 0 && proxy.served(addr_of(&b.url)) > 0);
}

const ALICE: &str = "alice-key-replicas-0123456789";
const BOB: &str = "bob-key-replicas-0123456789ab";

/// An API-keys file naming alice and bob, in a fresh temporary directory.
fn keys_file() -> String {
    let dir = std::env::temp_dir().join(format!(
        "switchboard-replicas-{}-{:x}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys");
    std::fs::write(&path, format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    path.to_string_lossy().into_owned()
}

/// Unique enough for a per-test directory and an unknown session id.
fn rand_suffix() -> u128 {
    use std::time::{SystemTime, UNIX_EPOCH};
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    t.as_nanos() ^ (u128::from(n) << 100)
}

#[tokio::test]
async fn another_principal_on_the_other_replica_gets_404_like_an_unknown_id() {
    let Some(redis) = Redis::start_or_skip("another_principal").await else {
        return;
    };
    let keys = keys_file();
    let auth = ["--api-keys-file", keys.as_str()];
    let (one, two) = tokio::join!(replica(&redis, &auth), replica(&redis, &auth));
    let alice_one = Endpoint::of(&one).with_key(ALICE);
    let alice_two = Endpoint::of(&two).with_key(ALICE);
    let bob_two = Endpoint::of(&two).with_key(BOB);
    let sid = alice_one.session().await;

    let stolen = bob_two.echo(&sid, json!(1), "bob's").await;
    let unknown_id = format!("{:032x}", rand_suffix());
    let unknown = bob_two.echo(&unknown_id, json!(1), "bob's").await;
    assert_eq!(stolen.status, StatusCode::NOT_FOUND, "{}", stolen.text);
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{}", unknown.text);
    assert_eq!(stolen.error_code(), -32001);
    assert_eq!(without_id(&stolen), without_id(&unknown), "no oracle");
    assert_eq!(stolen.content_type(), unknown.content_type());
    // Nor can bob end it from there.
    assert_eq!(bob_two.delete(&sid).await, StatusCode::NOT_FOUND);

    let mine = alice_two.echo(&sid, json!(2), "alice on two").await;
    assert_eq!(mine.status, StatusCode::OK, "{}", mine.text);
    assert_eq!(tool_text(&mine.json()), "alice on two");
    let back = alice_one.echo(&sid, json!(3), "alice on one").await;
    assert_eq!(tool_text(&back.json()), "alice on one");
}

#[tokio::test]
async fn delete_on_one_replica_ends_the_session_on_the_other() {
    let Some(redis) = Redis::start_or_skip("delete_on_one_replica").await else {
        return;
    };
    let (a, b) = tokio::join!(replica(&redis, &[]), replica(&redis, &[]));
    let (on_a, on_b) = (Endpoint::of(&a), Endpoint::of(&b));
    let sid = on_a.session().await;
    let other = on_a.session().await;
    // B serves it first, so whatever B keeps in memory for it is warm when A deletes it.
    let r = on_b.echo(&sid, json!(1), "before").await;
    assert_eq!(tool_text(&r.json()), "before");

    assert_eq!(on_a.delete(&sid).await, StatusCode::NO_CONTENT);
    let after = on_b.echo(&sid, json!(2), "after").await;
    assert_eq!(after.status, StatusCode::NOT_FOUND, "{}", after.text);
    assert_eq!(
        on_a.echo(&sid, json!(3), "x").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(on_b.delete(&sid).await, StatusCode::NOT_FOUND);
    // It ended alone: a session beside it lives on, on both.
    for (ep, text) in [(&on_a, "other on a"), (&on_b, "other on b")] {
        assert_eq!(
            tool_text(&ep.echo(&other, json!(4), text).await.json()),
            text
        );
    }
}

/// `resources/updated` for `uri`, as the backend behind `via` emits it (fixture `trigger`).
async fn updated_by(via: &Endpoint, sid: &str, uri: &str) {
    let args = json!({"kind": "resource_updated", "uri": uri});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "trigger", "arguments": args}});
    let r = via.post(Some(sid), &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// The URIs of the `resources/updated` events on `stream` up to (and including) the one for
/// `last`.
async fn updates_until(stream: &mut crate::common::Listener, last: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let event = stream.next().await.data;
        if event["method"] == "notifications/resources/updated" {
            let uri = event["params"]["uri"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            seen.push(uri.clone());
            if uri == last {
                return seen;
            }
        }
    }
}

#[tokio::test]
async fn a_stream_on_one_replica_hears_a_subscription_made_through_the_other() {
    let Some(redis) = Redis::start_or_skip("stream_across_replicas").await else {
        return;
    };
    let (a, b) = tokio::join!(replica(&redis, &[]), replica(&redis, &[]));
    let (on_a, on_b) = (Endpoint::of(&a), Endpoint::of(&b));
    // Two sessions opened on A, both listening on A; each subscribes to its own URI through B.
    let (one, two) = (on_a.session().await, on_a.session().await);
    let mut streams = Vec::new();
    for (sid, uri) in [
        (&one, "test://watched-resource"),
        (&two, "test://static-text"),
    ] {
        streams.push(crate::common::Listener::open(&a, sid, None).await);
        let sub = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                         "params": {"uri": uri}});
        let r = on_b.post(Some(sid), &sub).await;
        assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    }
    // B's backend announces one's URI, then two's: both reach A only through Redis.
    updated_by(&on_b, &one, "test://watched-resource").await;
    updated_by(&on_b, &two, "test://static-text").await;
    let heard_one = updates_until(&mut streams[0], "test://watched-resource").await;
    assert_eq!(heard_one, ["test://watched-resource"]);
    // Two's own update is its sentinel: one's, published before it, never reached two.
    let heard_two = updates_until(&mut streams[1], "test://static-text").await;
    assert_eq!(
        heard_two,
        ["test://static-text"],
        "only its own subscription"
    );
}

#[tokio::test]
async fn progress_of_a_request_reaches_its_own_stream_on_the_replica_running_it() {
    let Some(redis) = Redis::start_or_skip("progress_across_replicas").await else {
        return;
    };
    let (a, b) = tokio::join!(replica(&redis, &[]), replica(&redis, &[]));
    let sid = Endpoint::of(&a).session().await;
    let args = json!({"steps": 3, "intervalMs": 1});
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": "progress", "arguments": args,
                                 "_meta": {"progressToken": "mine"}}});
    // Opened on A, the call runs on B: its progress comes back on its own response stream.
    let r = Endpoint::of(&b).post(Some(&sid), &body).await;
    let msgs = r.messages();
    let progress: Vec<_> = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{}", r.text);
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "mine"),
        "{}",
        r.text
    );
    let last = msgs.last().unwrap();
    assert_eq!(last["id"], json!(5), "{}", r.text);
    assert_eq!(tool_text(last), "done", "{}", r.text);
}

#[tokio::test]
async fn an_unsubscribe_through_one_replica_is_honoured_by_the_other() {
    let Some(redis) = Redis::start_or_skip("unsubscribe_across_replicas").await else {
        return;
    };
    let (a, b) = tokio::join!(replica(&redis, &[]), replica(&redis, &[]));
    let (on_a, on_b) = (Endpoint::of(&a), Endpoint::of(&b));
    let sid = on_a.session().await;
    let mut stream = crate::common::Listener::open(&a, &sid, None).await;
    let rpc = |method: &str, uri: &str| json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": {"uri": uri}});
    // Subscribed through B, unsubscribed through A.
    let r = on_b
        .post(
            Some(&sid),
            &rpc("resources/subscribe", "test://watched-resource"),
        )
        .await;
    assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    let r = on_a
        .post(
            Some(&sid),
            &rpc("resources/unsubscribe", "test://watched-resource"),
        )
        .await;
    assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    // B's backend announces the URI the session left: B must not deliver it any more.
    updated_by(&on_b, &sid, "test://watched-resource").await;
    // The sentinel: a URI it is still subscribed to, through B, announced by B.
    let r = on_b
        .post(
            Some(&sid),
            &rpc("resources/subscribe", "test://static-text"),
        )
        .await;
    assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    updated_by(&on_b, &sid, "test://static-text").await;
    let heard = updates_until(&mut stream, "test://static-text").await;
    assert_eq!(
        heard,
        ["test://static-text"],
        "the unsubscribed URI was not delivered"
    );
}

#[tokio::test]
async fn a_delete_through_one_replica_closes_the_stream_held_by_the_other() {
    let Some(redis) = Redis::start_or_skip("delete_closes_streams").await else {
        return;
    };
    let (a, b) = tokio::join!(replica(&redis, &[]), replica(&redis, &[]));
    let sid = Endpoint::of(&a).session().await;
    let mut stream = crate::common::Listener::open(&a, &sid, None).await;
    assert_eq!(Endpoint::of(&b).delete(&sid).await, StatusCode::NO_CONTENT);
    // A hears of it at once, not at its next request for the session: its stream ends.
    assert!(
        stream.ends().await,
        "the stream on A outlived the DELETE through B"
    );
}

/// The `method`s of the events on `stream` up to (and including) the `resources/updated`
/// for `last`.
async fn methods_until(stream: &mut crate::common::Listener, last: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let event = stream.next().await.data;
        let method = event["method"].as_str().unwrap_or_default().to_owned();
        let done = method == "notifications/resources/updated" && event["params"]["uri"] == last;
        seen.push(method);
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn a_list_change_on_one_replica_reaches_every_stream_once() {
    let Some(redis) = Redis::start_or_skip("list_changed_across_replicas").await else {
        return;
    };
    let (a, b) = tokio::join!(replica(&redis, &[]), replica(&redis, &[]));
    let (on_a, on_b) = (Endpoint::of(&a), Endpoint::of(&b));
    // One session listening on A, one on B; each subscribed (through B) to a sentinel URI.
    let (one, two) = (on_a.session().await, on_b.session().await);
    let mut on_a_stream = crate::common::Listener::open(&a, &one, None).await;
    let mut on_b_stream = crate::common::Listener::open(&b, &two, None).await;
    for sid in [&one, &two] {
        let sub = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                         "params": {"uri": "test://watched-resource"}});
        let r = on_b.post(Some(sid), &sub).await;
        assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    }
    // B's backend changes its tools, then announces the sentinel URI.
    let args = json!({"kind": "tools_list_changed"});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "trigger", "arguments": args}});
    assert_eq!(on_b.post(Some(&two), &body).await.status, StatusCode::OK);
    updated_by(&on_b, &two, "test://watched-resource").await;
    for (name, stream) in [("A", &mut on_a_stream), ("B", &mut on_b_stream)] {
        let seen = methods_until(stream, "test://watched-resource").await;
        let changes = seen
            .iter()
            .filter(|m| *m == "notifications/tools/list_changed")
            .count();
        assert_eq!(changes, 1, "stream on {name}: {seen:?}");
    }
}

/// `--max-sessions-per-principal` holds across replicas: with a limit of 2, alice's two
/// sessions on replica one leave her none on replica two (429, her own quota); ending one
/// frees a place anywhere; bob is counted apart.
#[tokio::test]
async fn the_per_principal_session_limit_counts_every_replica() {
    let Some(redis) = Redis::start_or_skip("per_principal_limit").await else {
        return;
    };
    let keys = keys_file();
    let args = [
        "--api-keys-file",
        keys.as_str(),
        "--max-sessions-per-principal",
        "2",
    ];
    let (one, two) = tokio::join!(replica(&redis, &args), replica(&redis, &args));
    let alice_one = Endpoint::of(&one).with_key(ALICE);
    let alice_two = Endpoint::of(&two).with_key(ALICE);
    let first = alice_one.session().await;
    let _second = alice_one.session().await;
    let refused = alice_two.initialize().await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.text
    );
    assert!(refused.headers.get("mcp-session-id").is_none());
    let bob = Endpoint::of(&two).with_key(BOB).initialize().await;
    assert_eq!(bob.status, StatusCode::OK, "{}", bob.text);

    assert_eq!(alice_one.delete(&first).await, StatusCode::NO_CONTENT);
    let again = alice_two.initialize().await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
}
