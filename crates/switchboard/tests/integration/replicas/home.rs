//! Sessions served by one replica only, behind the round-robin balancer: backends that give
//! each session a process of its own (`--isolation per-session`) keep it in the replica that
//! opened the session (its home), and a request reaching the other replica is forwarded
//! there over the authenticated hop (`--replica-secret-file`). A listen stream resumed
//! through another replica is resumed at the one holding its events.

use std::collections::{HashMap, HashSet};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::client::{counter, kill_9, replica, without_id, Endpoint};
use super::proxy::{addr_of, Proxy};
use super::redis::Redis;
use super::{rand_suffix, updated_by};
use crate::common::{tool_text, Listener, Reply, TestGateway};

/// A secret file both replicas share (mode 0600), in a fresh temporary directory.
fn secret_file() -> String {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!(
        "switchboard-hop-{}-{:x}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secret");
    std::fs::write(&path, format!("{:064x}\n", rand_suffix())).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_string_lossy().into_owned()
}

/// Two replicas on `redis` forwarding to each other with one secret, plus `extra`.
async fn forwarding_pair(redis: &Redis, extra: &[&str]) -> (TestGateway, TestGateway) {
    forwarding_pair_with(redis, extra, &[]).await
}

/// The same, each fronting `backend` (empty: the built-in fixture).
pub(super) async fn forwarding_pair_with(
    redis: &Redis,
    extra: &[&str],
    backend: &[&str],
) -> (TestGateway, TestGateway) {
    let secret = secret_file();
    let url = redis.url();
    let mut args = vec![
        "--session-store",
        url.as_str(),
        "--replica-secret-file",
        secret.as_str(),
    ];
    args.extend_from_slice(extra);
    tokio::join!(
        TestGateway::start_with(&args, backend),
        TestGateway::start_with(&args, backend)
    )
}

const PER_SESSION: [&str; 2] = ["--isolation", "per-session"];

/// `tools/call pid`: the process id of the backend that answered, with JSON-RPC id `id`.
async fn pid_of(ep: &Endpoint, sid: &str, id: i64) -> Result<String, String> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "pid", "arguments": {}}});
    let r = ep.post(Some(sid), &body).await;
    let msg = last(&r).ok_or_else(|| format!("HTTP {}: {}", r.status, r.text))?;
    if r.status != StatusCode::OK || msg["id"] != json!(id) {
        return Err(format!("HTTP {}: {}", r.status, r.text));
    }
    Ok(tool_text(&msg).to_owned())
}

fn last(r: &Reply) -> Option<Value> {
    if r.status != StatusCode::OK {
        return None;
    }
    r.messages().pop()
}

#[tokio::test]
async fn per_session_processes_behind_round_robin_are_served_by_their_home_replica() {
    let Some(redis) = Redis::start_or_skip("per_session_round_robin").await else {
        return;
    };
    let (a, b) = forwarding_pair(&redis, &PER_SESSION).await;
    let proxy = Proxy::start(vec![addr_of(&a.url), addr_of(&b.url)]).await;
    let lb = Endpoint::new(&proxy.url());
    let mut sessions = Vec::new();
    for _ in 0..8 {
        sessions.push(lb.session().await);
    }
    // Every request opens a new connection: consecutive ones alternate replicas, so each
    // session is asked on both, half of the time through the replica that is not its home.
    let mut pids: HashMap<&str, HashSet<String>> = HashMap::new();
    for _round in 0..4 {
        for sid in &sessions {
            let pid = pid_of(&lb, sid, 7)
                .await
                .unwrap_or_else(|e| panic!("{sid}: {e}"));
            pids.entry(sid.as_str()).or_default().insert(pid);
        }
    }
    for (sid, seen) in &pids {
        assert_eq!(
            seen.len(),
            1,
            "session {sid} reached one process only: {seen:?}"
        );
    }
    let distinct: HashSet<_> = pids.values().flatten().collect();
    assert_eq!(
        distinct.len(),
        sessions.len(),
        "each session its own process"
    );
    let hops = counter(
        &a,
        "switchboard_replica_hops_total",
        ("outcome", "forwarded"),
    )
    .await
        + counter(
            &b,
            "switchboard_replica_hops_total",
            ("outcome", "forwarded"),
        )
        .await;
    assert!(hops >= 8.0, "requests were forwarded to their home: {hops}");
}

/// The `resources/updated` URIs in an answer's stream.
fn updates_in(r: &Reply) -> Vec<String> {
    r.messages()
        .iter()
        .filter(|m| m["method"] == "notifications/resources/updated")
        .filter_map(|m| m["params"]["uri"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn streams_through_the_other_replica_are_the_home_replicas_own() {
    let Some(redis) = Redis::start_or_skip("per_session_stream_elsewhere").await else {
        return;
    };
    let (a, b) = forwarding_pair(&redis, &PER_SESSION).await;
    let (on_a, on_b) = (Endpoint::of(&a), Endpoint::of(&b));
    // Both opened on A (their processes are there); used only through B.
    let (sid, other) = (on_a.session().await, on_a.session().await);
    let mut stream = Listener::open(&b, &sid, None).await;
    for (s, uri) in [
        (&sid, "test://watched-resource"),
        (&other, "test://static-text"),
    ] {
        let sub = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                         "params": {"uri": uri}});
        let r = on_b.post(Some(s), &sub).await;
        assert_eq!(last(&r).unwrap()["result"], json!({}), "{}", r.text);
    }
    // A session's own process tells it on the request's stream (one request in flight),
    // which comes back through B as A streamed it: each only its own update.
    let args = |uri: &str| json!({"kind": "resource_updated", "uri": uri});
    let call = |uri: &str| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                  "params": {"name": "trigger", "arguments": args(uri)}})
    };
    let r = on_b.post(Some(&other), &call("test://static-text")).await;
    assert_eq!(updates_in(&r), ["test://static-text"], "{}", r.text);
    let r = on_b
        .post(Some(&sid), &call("test://watched-resource"))
        .await;
    assert_eq!(updates_in(&r), ["test://watched-resource"], "{}", r.text);
    assert_eq!(last(&r).unwrap()["id"], json!(7));
    // The listen stream opened through B is A's: ending the session on A ends it.
    assert_eq!(on_a.delete(&sid).await, StatusCode::NO_CONTENT);
    assert!(
        stream.ends().await,
        "the stream through B outlived its session on A"
    );
    // And the other session, through B, still answers.
    assert!(pid_of(&on_b, &other, 8).await.is_ok());
}

#[tokio::test]
async fn a_session_whose_home_died_is_a_clean_404_and_the_others_live_on() {
    let Some(redis) = Redis::start_or_skip("home_died").await else {
        return;
    };
    let (a, b) = forwarding_pair(&redis, &PER_SESSION).await;
    let on_b = Endpoint::of(&b);
    let homed_on_a = Endpoint::of(&a).session().await;
    let homed_on_b = on_b.session().await;
    let before = pid_of(&on_b, &homed_on_a, 1).await.unwrap();
    assert!(!before.is_empty());
    kill_9(&a).await;

    let lost = on_b.echo(&homed_on_a, json!(2), "after").await;
    let unknown = on_b
        .echo(&format!("{:032x}", rand_suffix()), json!(2), "x")
        .await;
    assert_eq!(lost.status, StatusCode::NOT_FOUND, "{}", lost.text);
    assert_eq!(lost.error_code(), -32001);
    assert_eq!(without_id(&lost), without_id(&unknown), "a plain 404");
    // Ended in the store too: still 404, and nothing hangs on the dead address.
    let again = on_b.echo(&homed_on_a, json!(3), "again").await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "{}", again.text);
    // B's own session lives on, and B opens new ones.
    let mine = on_b.echo(&homed_on_b, json!(4), "b lives").await;
    assert_eq!(tool_text(&last(&mine).unwrap()), "b lives");
    let fresh = on_b.session().await;
    assert!(pid_of(&on_b, &fresh, 5).await.is_ok());
}

#[tokio::test]
async fn a_hop_header_that_does_not_verify_is_refused() {
    let Some(redis) = Redis::start_or_skip("forged_hop").await else {
        return;
    };
    let (a, _b) = forwarding_pair(&redis, &[]).await;
    let plain = replica(&redis, &[]).await;
    let sid = Endpoint::of(&a).session().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let forged = format!("v1.0123456789abcdef.{at}.{}", "ab".repeat(32));
    for (gw, header) in [(&a, forged.as_str()), (&a, "v1"), (&plain, forged.as_str())] {
        let r = gw
            .http
            .post(&gw.url)
            .header("accept", crate::common::BOTH)
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .header("switchboard-hop", header)
            .body(ping.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{header}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32600, "{body}");
        assert!(body.get("id").is_none(), "{body}");
    }
    // Without the header the same request is served.
    let r = Endpoint::of(&a)
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// Subscribes `sid` to `uri` through `ep`.
async fn subscribe(ep: &Endpoint, sid: &str, uri: &str) {
    let sub = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                     "params": {"uri": uri}});
    let r = ep.post(Some(sid), &sub).await;
    assert_eq!(r.json()["result"], json!({}), "{}", r.text);
}

#[tokio::test]
async fn a_listen_stream_resumes_through_another_replica_from_its_last_event_id() {
    let Some(redis) = Redis::start_or_skip("resume_elsewhere").await else {
        return;
    };
    let (a, b) = forwarding_pair(&redis, &[]).await;
    let on_a = Endpoint::of(&a);
    let sid = on_a.session().await;
    for uri in [
        "test://watched-resource",
        "test://static-text",
        "test://other",
    ] {
        subscribe(&on_a, &sid, uri).await;
    }
    let mut stream = Listener::open(&a, &sid, None).await;
    updated_by(&on_a, &sid, "test://watched-resource").await;
    let first = stream.next().await;
    assert_eq!(first.data["params"]["uri"], "test://watched-resource");
    let seen = first.id.expect("listen events have ids");
    assert!(seen.contains('@'), "the id names the replica: {seen}");
    drop(stream);
    // Missed while no stream was attached: kept by A only.
    updated_by(&on_a, &sid, "test://static-text").await;

    let mut resumed = Listener::open(&b, &sid, Some(&seen)).await;
    let replayed = resumed.next().await;
    assert_eq!(replayed.data["params"]["uri"], "test://static-text");
    // The sentinel, live after the replay: nothing was replayed twice or skipped.
    updated_by(&on_a, &sid, "test://other").await;
    let live = resumed.next().await;
    assert_eq!(live.data["params"]["uri"], "test://other");
    let suffix = |id: &Option<String>| {
        id.as_deref()
            .and_then(|i| i.split_once('@'))
            .map(|p| p.1.to_owned())
    };
    assert_eq!(
        suffix(&replayed.id),
        suffix(&Some(seen.clone())),
        "numbered by A"
    );
    assert_eq!(suffix(&live.id), suffix(&Some(seen.clone())));

    // A gone, its events went with it: B opens the stream afresh (its own numbering).
    drop(resumed);
    kill_9(&a).await;
    let mut fresh = Listener::open(&b, &sid, Some(&seen)).await;
    updated_by(&Endpoint::of(&b), &sid, "test://watched-resource").await;
    let event = fresh.next().await;
    assert_eq!(event.data["params"]["uri"], "test://watched-resource");
    assert_ne!(suffix(&event.id), suffix(&Some(seen)), "numbered by B");
}

#[tokio::test]
async fn an_http_sse_sessions_posts_through_the_other_replica_reach_its_stream() {
    let Some(redis) = Redis::start_or_skip("sse_hop").await else {
        return;
    };
    let (a, b) = forwarding_pair(&redis, &[]).await;
    let mut client = crate::legacy_sse::SseClient::open(&a).await;
    assert!(
        client.post_url_at("").contains("&replica="),
        "the endpoint names the replica holding the stream"
    );
    let via_b = client.post_url_at(&b.base());
    for n in 0..3 {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                          "params": {"name": "echo", "arguments": {"text": format!("via b {n}")}}});
        let (status, text) = client.post_at(&via_b, &call).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{text}");
        let answer = client.next().await;
        assert_eq!(answer["id"], n, "{answer}");
        assert_eq!(tool_text(&answer), format!("via b {n}"));
    }
    // Nothing else arrived: the next message is the sentinel's answer.
    client.sentinel().await;
    assert!(
        counter(
            &b,
            "switchboard_replica_hops_total",
            ("outcome", "forwarded")
        )
        .await
            >= 3.0
    );

    // A gone, its stream (the session) went with it: a clean 404 through B.
    kill_9(&a).await;
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let (status, text) = client.post_at(&via_b, &ping).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], -32001, "{body}");
}

#[tokio::test]
async fn another_principal_naming_a_homed_session_anywhere_gets_the_unknown_ids_404() {
    let Some(redis) = Redis::start_or_skip("homed_owner").await else {
        return;
    };
    let keys = super::keys_file();
    let mut extra = vec!["--api-keys-file", keys.as_str()];
    extra.extend_from_slice(&PER_SESSION);
    let (a, b) = forwarding_pair(&redis, &extra).await;
    let sid = Endpoint::of(&a).with_key(super::ALICE).session().await;
    let unknown = format!("{:032x}", rand_suffix());
    for gw in [&b, &a] {
        let bob = Endpoint::of(gw).with_key(super::BOB);
        let stolen = bob.echo(&sid, json!(1), "bob's").await;
        let none = bob.echo(&unknown, json!(1), "bob's").await;
        assert_eq!(stolen.status, StatusCode::NOT_FOUND, "{}", stolen.text);
        assert_eq!(without_id(&stolen), without_id(&none), "no oracle");
        assert_eq!(bob.delete(&sid).await, StatusCode::NOT_FOUND);
    }
    // Alice's session lives on, through the replica that is not its home too.
    for gw in [&b, &a] {
        let r = Endpoint::of(gw)
            .with_key(super::ALICE)
            .echo(&sid, json!(2), "alice")
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(tool_text(&r.json()), "alice");
    }
}

#[tokio::test]
async fn the_replica_secret_in_the_environment_never_reaches_a_backend() {
    let Some(redis) = Redis::start_or_skip("secret_env").await else {
        return;
    };
    let secret = format!("{:064x}", rand_suffix());
    let url = redis.url();
    let env = [("SWITCHBOARD_REPLICA_SECRET", secret.as_str())];
    let gw = TestGateway::start_env(&["--session-store", url.as_str()], &[], &env).await;
    let ep = Endpoint::of(&gw);
    let sid = ep.session().await;
    let seen = |name: &str| {
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
               "params": {"name": "env", "arguments": {"name": name}}})
    };
    let r = ep
        .post(Some(&sid), &seen("SWITCHBOARD_REPLICA_SECRET"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "", "the backend saw the secret");
    // The rest of the environment is inherited as before.
    let r = ep.post(Some(&sid), &seen("PATH")).await;
    assert!(!tool_text(&r.json()).is_empty(), "{}", r.text);
}
