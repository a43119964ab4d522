//! Warm partitions (`--isolation per-session`, Legacy-only backend): a 2026-07-28 client's
//! requests run on a backend process kept for its principal and declared capabilities, not on
//! a fresh process per call; principals never share one.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{stats, stats_as, tool_text};
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
    let s = stats_as(&gw, Some(ALICE)).await;
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

/// A `subscriptions/listen` stream as `key`, watching `uris`, past its acknowledgement.
async fn listen(
    gw: &crate::common::TestGateway,
    key: &str,
    uris: &[&str],
) -> std::pin::Pin<Box<impl futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>>>> {
    let body = json!({"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}},
        "notifications": {"resourceSubscriptions": uris}}});
    let resp = gw
        .http
        .post(&gw.url)
        .header("accept", crate::common::BOTH)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .header("authorization", format!("Bearer {key}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ));
    let ack = crate::modern::next_message(&mut events).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(uris)
    );
    events
}

/// A resource update the caller's own call causes arrives on its listen stream, and on no
/// other principal's: bob watches the same URI, and the first event he gets is his own
/// sentinel update, made after alice's.
#[tokio::test]
async fn a_listen_hears_its_partitions_updates_only() {
    let dir = two_keys("listen");
    let keys = dir.join("keys");
    let gw = bridge(&["--api-keys-file", keys.to_str().unwrap()]).await;
    let (uri, sentinel) = ("test://watched-resource", "test://bob-sentinel");
    let mut alice = listen(&gw, ALICE, &[uri]).await;
    let mut bob = listen(&gw, BOB, &[uri, sentinel]).await;
    let update = |key, uri| {
        call(
            &gw,
            Some(key),
            "trigger",
            json!({"kind": "resource_updated", "uri": uri}),
            json!({}),
            json!({}),
        )
    };
    assert_eq!(update(ALICE, uri).await.status, StatusCode::OK);
    let n = crate::modern::next_message(&mut alice).await;
    assert_eq!(n["method"], "notifications/resources/updated", "{n}");
    assert_eq!(n["params"]["uri"], uri);
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L1"
    );
    assert_eq!(update(BOB, sentinel).await.status, StatusCode::OK);
    let n = crate::modern::next_message(&mut bob).await;
    assert_eq!(
        n["params"]["uri"], sentinel,
        "alice's update reached bob: {n}"
    );
    assert_eq!(stats_as(&gw, Some(ALICE)).await["partitions"], 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A call that declared no capability, alone on its partition, whose backend asks for one
/// anyway: attributable, so it is refused with -32021 (HTTP 400); the partition lives on.
#[tokio::test]
async fn an_undeclared_capability_on_the_partition_is_refused_with_32021() {
    let gw = bridge(&[]).await;
    let warm = pid_of(&gw, None, json!({})).await;
    let r = call(
        &gw,
        None,
        "test_missing_capability",
        json!({}),
        json!({}),
        json!({}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let body = r.json();
    assert_eq!(body["id"], 7);
    assert_eq!(body["error"]["code"], -32021, "{body}");
    assert_eq!(
        body["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    assert_eq!(pid_of(&gw, None, json!({})).await, warm);
}

/// The official Python SDK 2.3.0's `Client`, pinned to 2026-07-28 (stateless: no handshake,
/// no session), against a Legacy-only backend: its two `pid` calls and a later one run on one
/// warm process (a fresh process per call would answer with different pids), and a
/// `subscriptions/listen` it opens through `Client.listen` hears the resource update its own
/// `trigger` call causes.
#[tokio::test]
async fn python_sdk_modern_client_reuses_its_process_and_hears_its_update() {
    let gw = bridge(&[]).await;
    let baseline = children(&gw);
    let v = crate::legacy_sse::python_client("modern", "py_modern_warm.py", &gw.url).await;
    assert_eq!(v["protocolVersion"], "2026-07-28", "{v}");
    let first = v["pids"][0].as_str().expect("a pid");
    assert!(first.parse::<u32>().is_ok(), "{v}");
    assert_eq!(v["pids"][1], first, "a fresh process per call: {v}");
    assert_eq!(v["pidAfter"], first, "{v}");
    let uri = "test://watched-resource";
    assert_eq!(v["honored"], json!([uri]), "{v}");
    assert_eq!(v["triggerError"], false, "{v}");
    assert_eq!(
        v["event"],
        json!({"type": "ResourceUpdated", "uri": uri}),
        "{v}"
    );
    // Every call, the trigger and the listen among them, was served by that one partition.
    assert_eq!(stats(&gw).await["partitions"], 1);
    assert_eq!(children(&gw), baseline + 1);
}

/// A leased call that ends without its answer (here: the gateway's deadline) may leave its
/// handler running on the backend, asking for input on behalf of a call nobody holds. Its
/// process is never leased again: the caller's next input-capable call runs on a fresh one,
/// so it can never receive the abandoned call's requests.
#[tokio::test]
async fn an_abandoned_leased_call_retires_its_process() {
    let gw = bridge(&["--request-timeout", "1"]).await;
    let warm = pid_of(&gw, None, elicitation()).await;
    let r = call(
        &gw,
        None,
        "slow",
        json!({"ms": 3000}),
        elicitation(),
        json!({}),
    )
    .await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{}", r.text);
    let next = pid_of(&gw, None, elicitation()).await;
    assert_ne!(next, warm, "the abandoned call's process was leased again");
    // The fresh one is the partition now.
    assert_eq!(pid_of(&gw, None, elicitation()).await, next);
    assert_eq!(stats(&gw).await["partitions"], 1);
}
