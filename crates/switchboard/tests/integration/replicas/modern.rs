//! Client input behind replicas. A Modern `requestState` is one replica's (its seal key and
//! its memory of used tokens live in that process, and a bridged call is parked there), and
//! so is a question the gateway put to a Legacy client (its waiter): the retry, or the
//! answer, reaching another replica is taken to the one that issued it, over the hop.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::client::{counter, counter_as, kill_9, Endpoint};
use super::home::forwarding_pair_with;
use super::redis::Redis;
use super::{keys_file, ALICE, BOB};
use crate::common::{tool_text, TestGateway, BOTH};
use crate::mrtr::{call, elicitation, input_required};
use crate::per_session::{next, open_call};
use crate::relay::legacy_session;

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
    hops_of(gw, "forwarded").await
}

async fn hops_of(gw: &TestGateway, outcome: &str) -> f64 {
    counter(gw, "switchboard_replica_hops_total", ("outcome", outcome)).await
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

#[tokio::test]
async fn a_legacy_clients_answer_through_the_other_replica_reaches_the_call_waiting_for_it() {
    let Some(redis) = Redis::start_or_skip("legacy_answer_hop").await else {
        return;
    };
    let backend = [SB, "fixture", "--era", "modern"];
    let (a, b) = forwarding_pair_with(&redis, &[], &backend).await;
    let sid = legacy_session(&a, json!({"elicitation": {}})).await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": ELICIT, "arguments": {}}});
    let mut stream = open_call(&a, &sid, call).await;
    let q = next(&mut stream).await;
    assert_eq!(q["method"], "elicitation/create", "{q}");
    let before = hops(&b).await;
    let reply = json!({"jsonrpc": "2.0", "id": q["id"],
                       "result": {"action": "accept", "content": {"name": "Ada"}}});
    let r = Endpoint::of(&b).post(Some(&sid), &reply).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    assert_eq!(hops(&b).await, before + 1.0, "the answer hopped to A");
    let done = next(&mut stream).await;
    assert_eq!(done["id"], 5, "{done}");
    assert_eq!(tool_text(&done), "Hello, Ada!", "{done}");
}

/// A Modern retry carrying `state`, as `key`, with `mcp-session-id: sid` as well.
async fn retry_naming_session(gw: &TestGateway, key: &str, sid: &str, state: &Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": ELICIT, "arguments": {},
        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Bob"}}},
        "requestState": state,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": elicitation()}}});
    let r = gw
        .http
        .post(&gw.url)
        .header("accept", BOTH)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", ELICIT)
        .header("mcp-session-id", sid)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_retry_for_a_dead_replica_ends_no_session_it_happens_to_name() {
    let Some(redis) = Redis::start_or_skip("dead_sealer").await else {
        return;
    };
    let keys = keys_file();
    let auth = ["--api-keys-file", keys.as_str()];
    let backend = [SB, "fixture", "--era", "modern"];
    let (a, b) = forwarding_pair_with(&redis, &auth, &backend).await;
    let alice = Endpoint::of(&b).with_key(ALICE);
    let sid = alice.session().await;
    let first =
        input_required(&call(&a, Some(BOB), ELICIT, json!({}), elicitation(), json!({})).await);
    // A dies; its registration outlives it for a while, so B still names it the sealer and
    // finds nothing listening there.
    kill_9(&a).await;
    let gone = || {
        counter_as(
            &b,
            Some(ALICE),
            "switchboard_replica_hops_total",
            ("outcome", "home_gone"),
        )
    };
    let before = gone().await;
    let refused = retry_naming_session(&b, BOB, &sid, &first["requestState"]).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(refused["error"]["data"]["reason"], "unknown_request_state");
    assert_eq!(refused["id"], 9, "{refused}");
    assert_eq!(gone().await, before + 1.0, "B tried A");
    // Alice's session, named by bob's request, is untouched.
    let r = alice.echo(&sid, json!(3), "still here").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "still here");
}
