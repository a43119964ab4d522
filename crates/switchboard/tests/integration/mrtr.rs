//! The MRTR bridge (`--isolation per-session`, Legacy-only backend): a Legacy backend's
//! elicitation/sampling/roots request during a Modern client's call becomes an `input_required`
//! result, and the client's retry with `inputResponses` completes the call.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{stats, stats_as, tool_text, Reply, TestGateway};

const V: &str = "2026-07-28";
pub(crate) const ALICE: &str = "alice-key-mrtr-0123456789ab";
pub(crate) const BOB: &str = "bob-key-mrtr-0123456789abcd";

/// `switchboard run --isolation per-session <extra> -- switchboard fixture --era legacy`.
pub(crate) async fn bridge(extra: &[&str]) -> TestGateway {
    let mut args = vec!["--isolation", "per-session"];
    args.extend_from_slice(extra);
    let bin = env!("CARGO_BIN_EXE_switchboard");
    TestGateway::start_with(&args, &[bin, "fixture", "--era", "legacy"]).await
}

/// A Modern `tools/call` declaring `caps`, with `extra` params (inputResponses, requestState),
/// as the holder of `key` (if any).
pub(crate) async fn call(
    gw: &TestGateway,
    key: Option<&str>,
    tool: &str,
    arguments: Value,
    caps: Value,
    extra: Value,
) -> Reply {
    let mut params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": caps,
        },
    });
    if let Value::Object(more) = extra {
        for (k, v) in more {
            params[k] = v;
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![
        ("mcp-protocol-version", V),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    if let Some(a) = auth.as_deref() {
        headers.push(("authorization", a));
    }
    gw.post_raw(None, body.to_string(), &headers).await
}

pub(crate) fn elicitation() -> Value {
    json!({"elicitation": {}})
}

/// The `input_required` result of a reply, asserting its shape.
pub(crate) fn input_required(r: &Reply) -> Value {
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let result = r.json()["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{result}");
    assert!(result["requestState"].is_string(), "{result}");
    result
}

/// Children of the gateway process that are still running (its backends).
pub(crate) fn children(gw: &TestGateway) -> usize {
    let me = gw.pid().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
                return false;
            };
            let mut fields = rest.split(' ');
            let state = fields.next().unwrap_or("");
            fields.next() == Some(me.as_str()) && state != "Z"
        })
        .count()
}

pub(crate) async fn settles(gw: &TestGateway, what: &str, check: impl Fn(&Value, usize) -> bool) {
    for _ in 0..100 {
        if check(&stats(gw).await, children(gw)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{what}: stats {} with {} children",
        stats(gw).await,
        children(gw)
    );
}

#[tokio::test]
async fn an_elicitation_round_trips_and_leaves_nothing_behind() {
    let gw = bridge(&[]).await;
    let baseline = children(&gw);
    let tool = "test_input_required_result_elicitation";

    // Round 1: the backend's elicitation/create becomes an inputRequest under its key.
    let r = call(&gw, None, tool, json!({}), elicitation(), json!({})).await;
    let first = input_required(&r);
    let asked = &first["inputRequests"]["user_name"];
    assert_eq!(asked["method"], "elicitation/create", "{first}");
    assert_eq!(asked["params"]["message"], "What is your name?");
    assert!(
        asked["params"].get("_meta").is_none(),
        "the key hint is the gateway's business: {asked}"
    );
    let state = first["requestState"].as_str().unwrap().to_owned();
    // Parked: one held call, on the caller's warm partition (one extra backend process).
    let s = stats(&gw).await;
    assert_eq!(s["tableEntries"], 1, "{s}");
    assert_eq!(s["partitions"], 1, "{s}");
    assert_eq!(children(&gw), baseline + 1);

    // A retry without the answer asks again (SHOULD), with a fresh single-use state.
    let r = call(
        &gw,
        None,
        tool,
        json!({}),
        elicitation(),
        json!({"inputResponses": {"unrelated": {"action": "decline"}}, "requestState": state}),
    )
    .await;
    let again = input_required(&r);
    assert!(again["inputRequests"].get("user_name").is_some(), "{again}");
    let state2 = again["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state, state2);

    // Round 2: the answer reaches the backend, and the result carries it.
    let answer = json!({"user_name": {"action": "accept", "content": {"name": "Alice"}}});
    let r = call(
        &gw,
        None,
        tool,
        json!({}),
        elicitation(),
        json!({"inputResponses": answer, "requestState": state2}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let done = r.json();
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(tool_text(&done), "Hello, Alice!");
    assert!(done["result"]["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());

    // Every state is single-use, the earlier one included.
    for used in [&state, &state2] {
        let r = call(
            &gw,
            None,
            tool,
            json!({}),
            elicitation(),
            json!({"inputResponses": answer, "requestState": used}),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
        assert_eq!(r.error_code(), -32602);
        assert_eq!(r.json()["error"]["data"]["reason"], "unknown_request_state");
    }
    // Nothing is held; the partition stays warm for the caller's next call (until idle).
    settles(&gw, "after completion", |s, n| {
        s["tableEntries"] == 0 && s["partitions"] == 1 && n == baseline + 1
    })
    .await;
}

#[tokio::test]
async fn a_raw_server_request_gets_a_gateway_key_and_the_answer_reaches_the_backend() {
    let gw = bridge(&[]).await;
    // `trigger` sends a plain Legacy elicitation/create (no key hint) and reports the answer.
    let args = json!({"kind": "elicitation"});
    let r = call(&gw, None, "trigger", args.clone(), elicitation(), json!({})).await;
    let first = input_required(&r);
    let requests = first["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let (key, asked) = requests.iter().next().unwrap();
    assert_eq!(asked["method"], "elicitation/create");
    assert_eq!(asked["params"]["message"], "trigger elicitation");
    let r = call(
        &gw,
        None,
        "trigger",
        args,
        elicitation(),
        json!({
            "inputResponses": {key: {"action": "accept", "content": {"ok": true}}},
            "requestState": first["requestState"],
        }),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let done = r.json();
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let report = &done["result"]["structuredContent"];
    assert_eq!(report["method"], "elicitation/create", "{done}");
    assert_eq!(
        report["answer"]["result"],
        json!({"action": "accept", "content": {"ok": true}}),
        "{done}"
    );
    settles(&gw, "after completion", |s, _| s["tableEntries"] == 0).await;
}

#[tokio::test]
async fn tampered_or_mismatched_state_is_refused() {
    let gw = bridge(&[]).await;
    let tool = "test_input_required_result_elicitation";
    let first = input_required(&call(&gw, None, tool, json!({}), elicitation(), json!({})).await);
    let state = first["requestState"].as_str().unwrap().to_owned();
    let answer = json!({"user_name": {"action": "accept", "content": {"name": "Mallory"}}});
    let mut flipped = state.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    for (label, bad, arguments) in [
        ("tampered", format!("{state}-TAMPERED"), json!({})),
        ("flipped MAC bit", flipped, json!({})),
        ("not a string", String::new(), json!({})),
        ("other arguments", state.clone(), json!({"extra": 1})),
    ] {
        let rs = if label == "not a string" {
            json!(42)
        } else {
            json!(bad)
        };
        let r = call(
            &gw,
            None,
            tool,
            arguments,
            elicitation(),
            json!({"inputResponses": answer, "requestState": rs}),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{label}: {}", r.text);
        assert_eq!(r.error_code(), -32602, "{label}");
        assert!(
            r.json()["error"]["data"]["reason"].is_string(),
            "{label}: {}",
            r.text
        );
    }
    // None of those consumed the call: the genuine retry still completes.
    let r = call(
        &gw,
        None,
        tool,
        json!({}),
        elicitation(),
        json!({"inputResponses": answer, "requestState": state}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "Hello, Mallory!");
    // A non-object inputResponses is a protocol error.
    let r = call(
        &gw,
        None,
        tool,
        json!({}),
        elicitation(),
        json!({"inputResponses": [1, 2]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.error_code(), -32602);
    settles(&gw, "after completion", |s, _| s["tableEntries"] == 0).await;
}

/// A keys file naming alice and bob, in a directory of its own (removed by the caller).
pub(crate) fn two_keys(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sb-mrtr-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keys"), format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    dir
}

#[tokio::test]
async fn another_principals_state_is_refused() {
    let dir = two_keys("foreign");
    let keys = dir.join("keys");
    let gw = bridge(&["--api-keys-file", keys.to_str().unwrap()]).await;
    let tool = "test_input_required_result_elicitation";
    let r = call(&gw, Some(ALICE), tool, json!({}), elicitation(), json!({})).await;
    let first = input_required(&r);
    let answer = json!({"user_name": {"action": "accept", "content": {"name": "Bob"}}});
    let retry = json!({"inputResponses": answer, "requestState": first["requestState"]});
    let r = call(
        &gw,
        Some(BOB),
        tool,
        json!({}),
        elicitation(),
        retry.clone(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.error_code(), -32602);
    assert_eq!(r.json()["error"]["data"]["reason"], "invalid_request_state");
    // Alice's call is untouched by Bob's attempt.
    let r = call(&gw, Some(ALICE), tool, json!({}), elicitation(), retry).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "Hello, Bob!");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_undeclared_capability_is_refused_with_32021() {
    let gw = bridge(&[]).await;
    let baseline = children(&gw);
    // Declares sampling only; the backend asks for elicitation anyway.
    let r = call(
        &gw,
        None,
        "trigger",
        json!({"kind": "elicitation"}),
        json!({"sampling": {}}),
        json!({}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let body = r.json();
    assert_eq!(body["id"], 7);
    assert_eq!(body["error"]["code"], -32021, "{body}");
    assert_eq!(
        body["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
    // Nothing is parked; the backend's request was refused, and its partition serves the
    // caller's next call.
    settles(&gw, "after -32021", |s, n| {
        s["tableEntries"] == 0 && s["partitions"] == 1 && n == baseline + 1
    })
    .await;
    let r = call(
        &gw,
        None,
        "pid",
        json!({}),
        json!({"sampling": {}}),
        json!({}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(children(&gw), baseline + 1);
}

#[tokio::test]
async fn multiple_requests_form_one_round_and_rounds_continue() {
    let gw = bridge(&[]).await;
    let caps = json!({"elicitation": {}, "sampling": {}, "roots": {}});
    let tool = "test_input_required_result_multiple_inputs";
    let first = input_required(&call(&gw, None, tool, json!({}), caps.clone(), json!({})).await);
    let keys: Vec<&String> = first["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 3, "{first}");
    let answers = json!({
        "user_name": {"action": "accept", "content": {"name": "Ada"}},
        "greeting": {"role": "assistant", "content": {"type": "text", "text": "Hi"}, "model": "m"},
        "client_roots": {"roots": [{"uri": "file:///w", "name": "w"}]},
    });
    let r = call(
        &gw,
        None,
        tool,
        json!({}),
        caps,
        json!({"inputResponses": answers, "requestState": first["requestState"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let text = tool_text(&r.json()).to_owned();
    assert!(
        text.contains("name=Ada") && text.contains("greeting=Hi") && text.contains("file:///w"),
        "{text}"
    );

    // Three rounds in a row, each with its own state.
    let tool = "test_input_required_result_multi_round";
    let r1 = input_required(&call(&gw, None, tool, json!({}), elicitation(), json!({})).await);
    assert!(r1["inputRequests"].get("step1").is_some(), "{r1}");
    let r2 = input_required(
        &call(
            &gw,
            None,
            tool,
            json!({}),
            elicitation(),
            json!({"inputResponses": {"step1": {"action": "accept", "content": {"name": "Ada"}}},
                   "requestState": r1["requestState"]}),
        )
        .await,
    );
    assert!(r2["inputRequests"].get("step2").is_some(), "{r2}");
    assert_ne!(r1["requestState"], r2["requestState"]);
    let r = call(
        &gw,
        None,
        tool,
        json!({}),
        elicitation(),
        json!({"inputResponses": {"step2": {"action": "accept", "content": {"color": "teal"}}},
               "requestState": r2["requestState"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        tool_text(&r.json()),
        "Hello Ada, your favorite color is teal"
    );
    settles(&gw, "after completion", |s, _| s["tableEntries"] == 0).await;
}

#[tokio::test]
async fn a_backend_ping_is_answered_by_the_gateway() {
    let gw = bridge(&[]).await;
    let r = call(
        &gw,
        None,
        "trigger",
        json!({"kind": "ping"}),
        json!({}),
        json!({}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let done = r.json();
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let report = &done["result"]["structuredContent"];
    assert_eq!(report["method"], "ping", "{done}");
    assert_eq!(report["answer"]["result"], json!({}), "{done}");
}

/// Concurrent input-capable calls of one caller: one holds its warm partition, every other
/// runs on a process of its own (what each asks must be attributable); those are bounded
/// (by `--max-sessions` here), and calls beyond get 503 instead of another fork. (One
/// anonymous principal here, so its share is raised above the whole pool.)
#[tokio::test]
async fn dedicated_processes_are_bounded() {
    let gw = bridge(&["--max-sessions", "3", "--mrtr-per-principal", "6"]).await;
    let calls = (0..6).map(|i| {
        call(
            &gw,
            None,
            "slow",
            json!({"ms": 1500 + i}),
            elicitation(),
            json!({}),
        )
    });
    let watcher = async {
        // While the calls run, never more than 1 shared + 1 partition + 3 dedicated children.
        let mut most = 0;
        for _ in 0..30 {
            most = most.max(children(&gw));
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        most
    };
    let (replies, most) = tokio::join!(futures::future::join_all(calls), watcher);
    assert!(most <= 5, "{most} children");
    let ok = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    let refused = replies
        .iter()
        .filter(|r| r.status == StatusCode::SERVICE_UNAVAILABLE)
        .count();
    assert_eq!((ok, refused), (4, 2), "{replies:?}");
    for r in replies
        .iter()
        .filter(|r| r.status == StatusCode::SERVICE_UNAVAILABLE)
    {
        assert_eq!(r.json()["id"], 7);
        let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains("dedicated backend process"), "{message}");
    }
}

/// One principal cannot take the whole pool of dedicated processes by parking calls (each
/// costs it nothing to keep for the held TTL): past its share (default an eighth of the pool,
/// here 16 / 8 = 2) it gets 429 with `retryAfterSeconds`, while another principal's calls
/// still run; finishing a call gives the share back.
#[tokio::test]
async fn one_principal_cannot_park_the_whole_bridge() {
    let dir = two_keys("share");
    let keys = dir.join("keys");
    let gw = bridge(&[
        "--api-keys-file",
        keys.to_str().unwrap(),
        "--max-sessions",
        "16",
    ])
    .await;
    let tool = "test_input_required_result_elicitation";
    let park = |key| call(&gw, Some(key), tool, json!({}), elicitation(), json!({}));
    let mut states = Vec::new();
    let refused = loop {
        let r = park(ALICE).await;
        if r.status != StatusCode::OK || states.len() > 16 {
            break r;
        }
        states.push(input_required(&r)["requestState"].clone());
    };
    assert_eq!(states.len(), 2, "alice parked more than her share");
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.text
    );
    let body = refused.json();
    assert_eq!(body["id"], 7, "{body}");
    assert_eq!(body["error"]["code"], 429, "{body}");
    let retry = body["error"]["data"]["retryAfterSeconds"].as_u64().unwrap();
    assert!((1..=300).contains(&retry), "{body}");
    assert_eq!(refused.headers["retry-after"], retry.to_string().as_str());
    // Nothing of alice's was touched by the refusal, and bob still gets his call.
    assert_eq!(stats_as(&gw, Some(ALICE)).await["tableEntries"], 2);
    let bob = input_required(&park(BOB).await);
    // Alice finishes one call: its unit of her share is back.
    let answer = json!({"user_name": {"action": "accept", "content": {"name": "A"}}});
    let done = call(
        &gw,
        Some(ALICE),
        tool,
        json!({}),
        elicitation(),
        json!({"inputResponses": answer, "requestState": states[0]}),
    )
    .await;
    assert_eq!(tool_text(&done.json()), "Hello, A!");
    input_required(&park(ALICE).await);
    assert_eq!(park(ALICE).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(bob["requestState"].is_string());
    let _ = std::fs::remove_dir_all(&dir);
}
