//! Modern retries behind replicas: a `requestState` is one replica's (its seal key and its
//! memory of used tokens live in that process, and a bridged call is parked there), so the
//! retry reaching another replica is answered by the one that issued it, over the hop.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::client::counter;
use super::home::forwarding_pair_with;
use super::redis::Redis;
use crate::common::{tool_text, TestGateway};
use crate::mrtr::{call, elicitation, input_required};

const SB: &str = env!("CARGO_BIN_EXE_switchboard");
const ELICIT: &str = "test_input_required_result_elicitation";

async fn ask(gw: &TestGateway, extra: Value) -> crate::common::Reply {
    call(gw, None, ELICIT, json!({}), elicitation(), extra).await
}

fn answer(state: &Value, name: &str) -> Value {
    json!({"inputResponses": {"user_name": {"action": "accept", "content": {"name": name}}},
           "requestState": state})
}

async fn hops(gw: &TestGateway) -> f64 {
    counter(
        gw,
        "switchboard_replica_hops_total",
        ("outcome", "forwarded"),
    )
    .await
}

/// First round on A, the retry on B: answered (by A), and the token then spent everywhere.
async fn retry_through_the_other_replica(a: &TestGateway, b: &TestGateway, name: &str) {
    let first = input_required(&ask(a, json!({})).await);
    let retry = answer(&first["requestState"], name);
    let before = hops(b).await;
    let r = ask(b, retry.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["result"]["resultType"], "complete", "{}", r.text);
    assert_eq!(tool_text(&r.json()), format!("Hello, {name}!"));
    assert_eq!(hops(b).await, before + 1.0, "the retry hopped to A");
    // Single use holds across replicas: spent at A, refused through either.
    for gw in [b, a] {
        let r = ask(gw, retry.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
        assert_eq!(r.json()["error"]["data"]["reason"], "unknown_request_state");
    }
}

#[tokio::test]
async fn a_relayed_request_state_is_answered_by_the_replica_that_sealed_it() {
    let Some(redis) = Redis::start_or_skip("modern_relay_hop").await else {
        return;
    };
    let backend = [SB, "fixture", "--era", "modern"];
    let (a, b) = forwarding_pair_with(&redis, &[], &backend).await;
    retry_through_the_other_replica(&a, &b, "Bob").await;
}

#[tokio::test]
async fn a_bridged_call_parked_on_one_replica_is_completed_through_the_other() {
    let Some(redis) = Redis::start_or_skip("modern_bridge_hop").await else {
        return;
    };
    let backend = [SB, "fixture", "--era", "legacy"];
    let (a, b) = forwarding_pair_with(&redis, &["--isolation", "per-session"], &backend).await;
    retry_through_the_other_replica(&a, &b, "Alice").await;
}
