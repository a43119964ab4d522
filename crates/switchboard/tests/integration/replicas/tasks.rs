//! Tasks behind replicas (issue 36). A task lives on the backend process of the replica that
//! created it, and so does its owner table: its handle names that replica
//! (`sbt-REPLICA-…`), and a task method reaching another replica is served there over the
//! hop, with the same owner check. Another principal, through either replica, gets exactly
//! the answer a handle that names nothing gets.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::client::{counter_as, Endpoint};
use super::home::forwarding_pair_with;
use super::redis::Redis;
use super::{keys_file, ALICE, BOB};
use crate::common::{Reply, TestGateway};
use crate::vmcp::modern;

async fn hops(gw: &TestGateway) -> f64 {
    let forwarded = ("outcome", "forwarded");
    counter_as(gw, Some(ALICE), "switchboard_replica_hops_total", forwarded).await
}

/// The replica a handle names (`sbt-REPLICA-RANDOM`).
fn replica_of(handle: &str) -> &str {
    let rest = handle.strip_prefix("sbt-").unwrap_or_default();
    rest.split_once('-').map(|(r, _)| r).unwrap_or_default()
}

/// A Modern request as `key`'s holder (the Tasks extension declared).
async fn as_modern(gw: &TestGateway, key: &str, method: &str, params: Value) -> Reply {
    let auth = format!("Bearer {key}");
    modern(gw, json!("q"), method, params, &[("authorization", &auth)]).await
}

async fn modern_ok(gw: &TestGateway, key: &str, method: &str, params: Value) -> Value {
    let r = as_modern(gw, key, method, params).await;
    assert_eq!(r.status, StatusCode::OK, "{method}: {}", r.text);
    let v = r.json();
    assert!(v["result"].is_object(), "{method}: {v}");
    v["result"].clone()
}

/// `tasks/get` through `gw` until the task is no longer working (10 s at most).
async fn settled(gw: &TestGateway, key: &str, task: &str) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = modern_ok(gw, key, "tasks/get", json!({"taskId": task})).await;
        assert_eq!(got["taskId"], json!(task), "{got}");
        if got["status"] != "working" || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A foreign handle and two that name nothing (one naming the same replica, one an unknown
/// replica) get byte for byte the same answer through `gw`, as `key`'s holder, for `method`.
async fn no_oracle(gw: &TestGateway, key: &str, method: &str, foreign: &str) {
    let home = replica_of(foreign);
    let same_home = format!("sbt-{home}-{}", "0".repeat(32));
    let nowhere = format!("sbt-{}-{}", "f".repeat(16), "0".repeat(32));
    let stolen = as_modern(gw, key, method, json!({"taskId": foreign})).await;
    assert_eq!(stolen.error_code(), -32602, "{method}: {}", stolen.text);
    for unknown in [&same_home, &nowhere] {
        let r = as_modern(gw, key, method, json!({"taskId": unknown})).await;
        assert_eq!(
            (stolen.status, &stolen.text),
            (r.status, &r.text),
            "{method} {unknown}"
        );
    }
}

/// The Tasks extension (Modern): alice creates two tasks through A; through B she polls one
/// to its result (the fixture inlines it in `tasks/get`) and cancels the other, each request
/// hopping to A; bob, through B and through A, gets the unknown-task answer for alice's
/// handle, exactly as for handles that name nothing, and his cancel changes nothing.
#[tokio::test]
async fn an_extension_task_created_through_one_replica_is_polled_through_the_other() {
    let Some(redis) = Redis::start_or_skip("extension_task_hop").await else {
        return;
    };
    let keys = keys_file();
    let auth = ["--api-keys-file", keys.as_str()];
    let (a, b) = forwarding_pair_with(&redis, &auth, &[]).await;
    let compute = |seconds: f64, label: &str| json!({"name": "slow_compute", "arguments": {"seconds": seconds, "label": label}});
    let quick = modern_ok(&a, ALICE, "tools/call", compute(0.2, "quick")).await;
    let long = modern_ok(&a, ALICE, "tools/call", compute(60.0, "long")).await;
    assert_eq!(quick["resultType"], "task", "{quick}");
    let (quick, long) = (
        quick["taskId"].as_str().unwrap_or_default().to_owned(),
        long["taskId"].as_str().unwrap_or_default().to_owned(),
    );
    assert_eq!(replica_of(&quick).len(), 16, "a handle naming A: {quick}");

    let before = hops(&b).await;
    let done = settled(&b, ALICE, &quick).await;
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"].as_str();
    assert!(text.unwrap_or_default().ends_with("(quick)"), "{done}");
    assert!(hops(&b).await > before, "B sent the polls to A");

    for gw in [&b, &a] {
        for m in ["tasks/get", "tasks/cancel"] {
            no_oracle(gw, BOB, m, &long).await;
        }
    }
    let still = modern_ok(&b, ALICE, "tasks/get", json!({"taskId": long})).await;
    assert_eq!(
        still["status"], "working",
        "bob's cancels did nothing: {still}"
    );
    let ack = modern_ok(&b, ALICE, "tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(ack["resultType"], "complete", "{ack}");
    assert_eq!(settled(&a, ALICE, &long).await["status"], "cancelled");
}

/// A Legacy request on `sid` (a session of `key`'s holder) through `gw`.
async fn in_session(gw: &TestGateway, key: &str, sid: &str, method: &str, params: Value) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": "q", "method": method, "params": params});
    Endpoint::of(gw).with_key(key).post(Some(sid), &body).await
}

/// 2025-11-25 tasks (a Legacy session on a backend with task-augmented `tools/call`): alice
/// creates a task through A; through B, in the same session, she polls it (`tasks/get`),
/// fetches its result (`tasks/result`) and finds it listed nowhere else; bob, in his own
/// session through B, gets the unknown-task answer for it, exactly as for a handle that names
/// nothing.
#[tokio::test]
async fn a_session_task_created_through_one_replica_is_fetched_through_the_other() {
    let Some(redis) = Redis::start_or_skip("session_task_hop").await else {
        return;
    };
    let keys = keys_file();
    let auth = ["--api-keys-file", keys.as_str()];
    let pushy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/pushy.py"
    );
    let (a, b) = forwarding_pair_with(&redis, &auth, &["python3", pushy]).await;
    let alice_sid = Endpoint::of(&a).with_key(ALICE).session().await;
    let bob_sid = Endpoint::of(&b).with_key(BOB).session().await;
    let call = json!({"name": "work", "arguments": {}, "task": {"ttl": 60000}});
    let created = in_session(&a, ALICE, &alice_sid, "tools/call", call).await;
    let task = created.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {}", created.text))
        .to_owned();
    assert_eq!(replica_of(&task).len(), 16, "a handle naming A: {task}");

    let before = hops(&b).await;
    let got = in_session(&b, ALICE, &alice_sid, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(got.json()["result"]["taskId"], json!(task), "{}", got.text);
    assert_eq!(got.json()["result"]["status"], "working", "{}", got.text);
    let result = in_session(
        &b,
        ALICE,
        &alice_sid,
        "tasks/result",
        json!({"taskId": task}),
    )
    .await;
    let text = result.json()["result"]["content"][0]["text"].clone();
    assert_eq!(text, json!("result of task-1"), "{}", result.text);
    assert_eq!(hops(&b).await, before + 2.0, "both hopped to A");

    let unknown = format!("sbt-{}-{}", replica_of(&task), "0".repeat(32));
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let stolen = in_session(&b, BOB, &bob_sid, m, json!({"taskId": task})).await;
        let none = in_session(&b, BOB, &bob_sid, m, json!({"taskId": unknown})).await;
        assert_eq!(stolen.error_code(), -32602, "{m}: {}", stolen.text);
        assert_eq!(
            (stolen.status, &stolen.text),
            (none.status, &none.text),
            "{m}"
        );
    }
    let still = in_session(&a, ALICE, &alice_sid, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(
        still.json()["result"]["status"],
        "working",
        "{}",
        still.text
    );
}

/// The replica holding a task is gone (killed): through the other, its handle is an unknown
/// task (the task went with that replica's backend), never a hang or a retryable 503.
#[tokio::test]
async fn a_task_whose_replica_is_gone_is_an_unknown_task() {
    let Some(redis) = Redis::start_or_skip("task_replica_gone").await else {
        return;
    };
    let keys = keys_file();
    let auth = ["--api-keys-file", keys.as_str()];
    let (a, b) = forwarding_pair_with(&redis, &auth, &[]).await;
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 60.0, "label": "x"}});
    let created = modern_ok(&a, ALICE, "tools/call", call).await;
    let task = created["taskId"].as_str().unwrap_or_default().to_owned();
    super::client::kill_9(&a).await;
    let r = as_modern(&b, ALICE, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(r.error_code(), -32602, "{}", r.text);
    assert_eq!(
        r.json()["error"]["message"],
        "Invalid params: unknown taskId"
    );
}

/// A sessionless Legacy request as `key`'s holder.
async fn as_sessionless(gw: &TestGateway, key: &str, method: &str, params: Value) -> Reply {
    let auth = format!("Bearer {key}");
    let body = json!({"jsonrpc": "2.0", "id": "s", "method": method, "params": params});
    gw.post_raw(None, body.to_string(), &[("authorization", &auth)])
        .await
}

/// A Legacy caller naming a gone replica's handle gets the answer its era gives a handle that
/// names nothing (200 with the JSON-RPC error), byte for byte, as a Modern one does.
#[tokio::test]
async fn a_gone_replicas_handle_is_the_eras_unknown_task() {
    let Some(redis) = Redis::start_or_skip("task_replica_gone_legacy").await else {
        return;
    };
    let keys = keys_file();
    let auth = ["--api-keys-file", keys.as_str()];
    let (a, b) = forwarding_pair_with(&redis, &auth, &[]).await;
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 60.0}, "task": {}});
    let created = as_sessionless(&a, ALICE, "tools/call", call).await.json();
    let task = created["result"]["task"]["taskId"].clone();
    assert!(
        task.as_str().is_some_and(|t| t.starts_with("sbt-")),
        "{created}"
    );
    super::client::kill_9(&a).await;
    let gone = as_sessionless(&b, ALICE, "tasks/get", json!({"taskId": task})).await;
    let never = json!({"taskId": "sbt-nothing"});
    let unknown = as_sessionless(&b, ALICE, "tasks/get", never).await;
    assert_eq!(unknown.status, StatusCode::OK, "{}", unknown.text);
    assert_eq!((gone.status, gone.text), (unknown.status, unknown.text));
}

/// A shared backend's question about a session's task goes to that session's client under a
/// key naming the replica that asked: the client's answer, posted through the other replica,
/// is handed over there, reaches the backend, and the task finishes with it.
#[tokio::test]
async fn a_task_question_answered_through_the_other_replica_reaches_its_backend() {
    let Some(redis) = Redis::start_or_skip("task_question_other_replica").await else {
        return;
    };
    let (a, b) = forwarding_pair_with(&redis, &[], &[]).await;
    let (sid, _) = crate::fixture_tasks::session(&a, json!({"elicitation": {}})).await;
    let mut listen = crate::common::Listener::open(&a, &sid, None).await;
    let name = "confirm_delete";
    let task = crate::fixture_tasks::create(&a, &sid, name, json!({"filename": "r.txt"})).await;
    let question = listen.next().await.data;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true}}});
    let posted = b.post(Some(&sid), &answer).await;
    assert_eq!(posted.status, StatusCode::ACCEPTED, "{}", posted.text);
    let result = json!({"jsonrpc": "2.0", "id": "r", "method": "tasks/result",
        "params": {"taskId": task["taskId"]}});
    let done = a.post(Some(&sid), &result).await.json();
    assert_eq!(crate::common::tool_text(&done), "Deleted r.txt", "{done}");
}
