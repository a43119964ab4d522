//! Warm partitions (`--isolation per-session`, Legacy-only backend): a 2026-07-28 client's
//! requests run on a backend process kept for its principal and declared capabilities, not on
//! a fresh process per call; principals never share one.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{stats, tool_text};
use crate::mrtr::{
    bridge, call, children, elicitation, input_required, settles, two_keys, ALICE, BOB,
};

/// The pid of the backend process that served a `pid` call declaring `caps`.
async fn pid_of(gw: &crate::common::TestGateway, key: Option<&str>, caps: Value) -> String {
    let r = call(gw, key, "pid", json!({}), caps, json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    tool_text(&r.json()).to_owned()
}

#[tokio::test]
async fn calls_of_one_principal_reuse_its_process_and_principals_never_share() {
    let dir = two_keys("warm");
    let keys = dir.join("keys");
    let gw = bridge(&["--api-keys-file", keys.to_str().unwrap()]).await;
    let baseline = children(&gw);
    let first = pid_of(&gw, Some(ALICE), json!({})).await;
    assert_eq!(pid_of(&gw, Some(ALICE), json!({})).await, first);
    let bob = pid_of(&gw, Some(BOB), json!({})).await;
    assert_ne!(bob, first, "two principals on one process");
    assert_eq!(pid_of(&gw, Some(BOB), json!({})).await, bob);
    // Another declared capability set is another handshake, hence another process.
    let eliciting = pid_of(&gw, Some(ALICE), elicitation()).await;
    assert_ne!(eliciting, first);
    assert_eq!(pid_of(&gw, Some(ALICE), elicitation()).await, eliciting);
    assert_eq!(pid_of(&gw, Some(ALICE), json!({})).await, first);
    let s = stats(&gw).await;
    assert_eq!(s["partitions"], 3, "{s}");
    assert_eq!(s["tableEntries"], 0, "{s}");
    assert_eq!(children(&gw), baseline + 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_elicitation_round_trip_runs_on_the_partition() {
    let gw = bridge(&[]).await;
    let baseline = children(&gw);
    let warm = pid_of(&gw, None, elicitation()).await;
    let tool = "test_input_required_result_elicitation";
    let first = input_required(&call(&gw, None, tool, json!({}), elicitation(), json!({})).await);
    // No process was started for the call: it is parked on the partition.
    assert_eq!(children(&gw), baseline + 1);
    let answer = json!({"user_name": {"action": "accept", "content": {"name": "Ada"}}});
    let r = call(
        &gw,
        None,
        tool,
        json!({}),
        elicitation(),
        json!({"inputResponses": answer, "requestState": first["requestState"]}),
    )
    .await;
    assert_eq!(tool_text(&r.json()), "Hello, Ada!");
    assert_eq!(pid_of(&gw, None, elicitation()).await, warm);
    assert_eq!(children(&gw), baseline + 1);
}

/// Two input-capable calls at once on one partition would make the backend's requests
/// ambiguous: the second runs on a dedicated process, and both complete.
#[tokio::test]
async fn concurrent_input_calls_both_complete_one_on_a_dedicated_process() {
    let gw = bridge(&[]).await;
    let baseline = children(&gw);
    let tool = "test_input_required_result_elicitation";
    let a = input_required(&call(&gw, None, tool, json!({}), elicitation(), json!({})).await);
    let b = input_required(&call(&gw, None, tool, json!({}), elicitation(), json!({})).await);
    // The partition and one dedicated process.
    assert_eq!(children(&gw), baseline + 2);
    assert_eq!(stats(&gw).await["partitions"], 1);
    for (state, name) in [(&b["requestState"], "B"), (&a["requestState"], "A")] {
        let answer = json!({"user_name": {"action": "accept", "content": {"name": name}}});
        let r = call(
            &gw,
            None,
            tool,
            json!({}),
            elicitation(),
            json!({"inputResponses": answer, "requestState": state}),
        )
        .await;
        assert_eq!(tool_text(&r.json()), format!("Hello, {name}!"));
    }
    // The dedicated process is gone; the partition is free for the next input call.
    settles(&gw, "after both", |s, n| {
        s["tableEntries"] == 0 && n == baseline + 1
    })
    .await;
    input_required(&call(&gw, None, tool, json!({}), elicitation(), json!({})).await);
    assert_eq!(children(&gw), baseline + 1);
}

#[tokio::test]
async fn a_dead_partition_is_replaced_and_an_idle_one_reaped() {
    let gw = bridge(&["--partition-idle", "0.2"]).await;
    let baseline = children(&gw);
    let first = pid_of(&gw, None, json!({})).await;
    let r = call(&gw, None, "exit", json!({}), json!({}), json!({})).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text);
    assert_eq!(r.json()["id"], 7);
    let second = pid_of(&gw, None, json!({})).await;
    assert_ne!(second, first);
    // Unused for longer than --partition-idle: stopped by the reaper.
    settles(&gw, "idle partition reaped", |s, n| {
        s["partitions"] == 0 && n == baseline
    })
    .await;
    // And started again on demand.
    assert_ne!(pid_of(&gw, None, json!({})).await, second);
}
