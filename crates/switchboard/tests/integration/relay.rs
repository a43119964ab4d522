//! MRTR across eras with Modern backends (issue 18, `core::relay`): a Legacy client is asked
//! on its session for what a Modern backend's `input_required` needs and sees one ordinary
//! result; a Modern client gets the backend's `requestState` only inside a sealed,
//! owner-bound, single-use gateway token.

mod sdk;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, Reply, TestGateway};
use crate::mrtr::{call, elicitation, input_required, two_keys, ALICE, BOB};
use crate::per_session::{next, open_call, Events};

const SB: &str = env!("CARGO_BIN_EXE_switchboard");

/// `switchboard run <extra> -- switchboard fixture --era modern`.
pub(crate) async fn modern_backend(extra: &[&str]) -> TestGateway {
    TestGateway::start_with(extra, &[SB, "fixture", "--era", "modern"]).await
}

/// A Legacy session declaring `caps`.
pub(crate) async fn legacy_session(gw: &TestGateway, caps: Value) -> String {
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":caps,"clientInfo":{"name":"it","version":"0"}}});
    let r = gw.post(None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(
        gw.post(Some(&sid), &note).await.status,
        StatusCode::ACCEPTED
    );
    sid
}

fn tool_call(id: u64, name: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":{}}})
}

/// Answers the gateway's request `q` in session `sid` with `result`.
async fn answer(gw: &TestGateway, sid: &str, q: &Value, result: Value) {
    let body = json!({"jsonrpc":"2.0","id":q["id"],"result":result});
    let r = gw.post(Some(sid), &body).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}

/// Legacy client, Modern backend, over `gw`: the elicitation arrives on the call's own stream
/// under a gateway key, another session cannot answer it, and the call then completes.
pub(crate) async fn legacy_elicitation_round_trip(gw: &TestGateway, tool: &str) {
    let caps = json!({"elicitation": {}});
    let (a, b) = (
        legacy_session(gw, caps.clone()).await,
        legacy_session(gw, caps).await,
    );
    let mut stream: Events = open_call(gw, &a, tool_call(5, tool)).await;
    let q = next(&mut stream).await;
    assert_eq!(q["method"], "elicitation/create", "{q}");
    assert!(q["id"].as_str().unwrap().starts_with("sbg-"), "{q}");
    // Session B answering A's question is refused, and A's call still waits for A.
    let forged = json!({"jsonrpc":"2.0","id":q["id"],"result":{"action":"accept","content":{"name":"Mallory"}}});
    let r = gw.post(Some(&b), &forged).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    answer(
        gw,
        &a,
        &q,
        json!({"action":"accept","content":{"name":"Ada"}}),
    )
    .await;
    let done = next(&mut stream).await;
    assert_eq!(done["id"], 5, "{done}");
    assert_eq!(tool_text(&done), "Hello, Ada!", "{done}");
    assert!(done["result"].get("resultType").is_none(), "{done}");
}

#[tokio::test]
async fn run_legacy_client_is_asked_for_a_modern_backends_input() {
    let gw = modern_backend(&[]).await;
    legacy_elicitation_round_trip(&gw, "test_input_required_result_elicitation").await;
}

#[tokio::test]
async fn run_legacy_client_goes_through_several_rounds_and_inputs() {
    let gw = modern_backend(&[]).await;
    let caps = json!({"elicitation": {}, "sampling": {}, "roots": {}});
    let sid = legacy_session(&gw, caps).await;
    let mut stream = open_call(
        &gw,
        &sid,
        tool_call(6, "test_input_required_result_multi_round"),
    )
    .await;
    let mut asked = Vec::new();
    let done = loop {
        let m = next(&mut stream).await;
        let Some(method) = m["method"].as_str() else {
            break m;
        };
        asked.push(method.to_owned());
        let result = match method {
            "elicitation/create" => {
                json!({"action":"accept","content":{"name":"Ada","color":"blue"}})
            }
            "sampling/createMessage" => json!({"role":"assistant","model":"m",
                "content":{"type":"text","text":"Paris"}}),
            _ => json!({"roots":[{"uri":"file:///w","name":"w"}]}),
        };
        answer(&gw, &sid, &m, result).await;
        assert!(asked.len() <= 8, "{asked:?}");
    };
    assert_eq!(
        asked,
        ["elicitation/create", "elicitation/create"],
        "one per round"
    );
    assert_eq!(
        tool_text(&done),
        "Hello Ada, your favorite color is blue",
        "{done}"
    );
}

#[tokio::test]
async fn a_legacy_client_without_elicitation_gets_32021_promptly() {
    let gw = modern_backend(&["--request-timeout", "30"]).await;
    let sid = legacy_session(&gw, json!({})).await;
    let started = std::time::Instant::now();
    let r = gw
        .post(
            Some(&sid),
            &tool_call(7, "test_input_required_result_elicitation"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let m = r.messages().pop().unwrap();
    assert_eq!(m["error"]["code"], -32021, "{m}");
    assert!(
        m["error"]["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{m}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn an_unanswered_question_times_out_and_a_session_end_ends_the_wait() {
    let gw = modern_backend(&["--request-timeout", "1"]).await;
    let sid = legacy_session(&gw, json!({"elicitation": {}})).await;
    let mut stream = open_call(&gw, &sid, tool_call(8, ELICIT)).await;
    assert_eq!(next(&mut stream).await["method"], "elicitation/create");
    // Never answered: the call gets the deadline's error (next() is bounded by 10 s).
    let done = next(&mut stream).await;
    assert_eq!(done["id"], 8, "{done}");
    assert_eq!(done["error"]["code"], -32000, "{done}");
    // A late answer names a waiter that is gone.
    let gw2 = modern_backend(&[]).await;
    let sid = legacy_session(&gw2, json!({"elicitation": {}})).await;
    let mut stream = open_call(&gw2, &sid, tool_call(9, ELICIT)).await;
    let q = next(&mut stream).await;
    let r = gw2
        .http
        .delete(&gw2.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    // The call ends (an error or the stream closing), never waits on.
    let ended = tokio::time::timeout(
        Duration::from_secs(10),
        futures::StreamExt::next(&mut stream),
    )
    .await
    .expect("the call still waits after its session ended");
    if let Some(Ok(event)) = ended {
        let data: Value = serde_json::from_str(event.data.as_deref().unwrap_or("{}")).unwrap();
        assert!(data.get("result").is_none(), "{data}");
    }
    let body =
        json!({"jsonrpc":"2.0","id":q["id"],"result":{"action":"accept","content":{"name":"x"}}});
    assert_eq!(
        gw2.post(Some(&sid), &body).await.status,
        StatusCode::NOT_FOUND
    );
}

/// The Legacy relay's rounds share one deadline (`--max-request-time`): a second round's
/// question left unanswered ends the call when the whole call's time is up, not a fresh
/// `--request-timeout` (60 s here) after the question.
#[tokio::test]
async fn a_legacy_relay_has_one_deadline_across_rounds() {
    let gw = modern_backend(&["--max-request-time", "2"]).await;
    let sid = legacy_session(&gw, json!({"elicitation": {}})).await;
    let tool = "test_input_required_result_multi_round";
    let mut stream = open_call(&gw, &sid, tool_call(6, tool)).await;
    let q = next(&mut stream).await;
    assert_eq!(q["method"], "elicitation/create", "{q}");
    let content = json!({"action":"accept","content":{"name":"Ada","color":"blue"}});
    answer(&gw, &sid, &q, content).await;
    let q = next(&mut stream).await;
    assert_eq!(q["method"], "elicitation/create", "second round: {q}");
    // Unanswered: the call's deadline ends it (next() waits at most 10 s).
    let done = next(&mut stream).await;
    assert_eq!(done["id"], 6, "{done}");
    assert_eq!(done["error"]["code"], -32000, "{done}");
}

/// A Legacy client's `notifications/cancelled` for its call while the relay waits on its
/// answer ends the call with the cancelled answer; the question is then gone.
#[tokio::test]
async fn a_legacy_clients_cancel_while_a_question_is_pending_ends_the_call() {
    let gw = modern_backend(&[]).await;
    let sid = legacy_session(&gw, json!({"elicitation": {}})).await;
    let mut stream = open_call(&gw, &sid, tool_call(9, ELICIT)).await;
    let q = next(&mut stream).await;
    assert_eq!(q["method"], "elicitation/create", "{q}");
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled",
        "params":{"requestId":9,"reason":"changed my mind"}});
    assert_eq!(
        gw.post(Some(&sid), &cancel).await.status,
        StatusCode::ACCEPTED
    );
    let done = next(&mut stream).await;
    assert_eq!(done["id"], 9, "{done}");
    assert_eq!(done["error"]["code"], -32800, "{done}");
    // The wait was withdrawn before the answer was written: a late reply names nothing.
    let late =
        json!({"jsonrpc":"2.0","id":q["id"],"result":{"action":"accept","content":{"name":"x"}}});
    let r = gw.post(Some(&sid), &late).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
}

/// The token of a relayed `input_required` and the retry that answers it.
fn retry_of(first: &Value, name: &str) -> Value {
    let token = first["requestState"].as_str().unwrap();
    assert!(token.starts_with("r2."), "not the gateway's token: {token}");
    json!({"inputResponses": {"user_name": {"action": "accept", "content": {"name": name}}},
        "requestState": token})
}

const ELICIT: &str = "test_input_required_result_elicitation";

async fn modern_call(gw: &TestGateway, key: Option<&str>, extra: Value) -> Reply {
    call(gw, key, ELICIT, json!({}), elicitation(), extra).await
}

async fn modern_call_to(gw: &TestGateway, tool: &str, extra: Value) -> Reply {
    call(gw, None, tool, json!({}), elicitation(), extra).await
}

fn refused(r: &Reply, reason: &str) {
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.error_code(), -32602, "{}", r.text);
    assert_eq!(r.json()["error"]["data"]["reason"], reason, "{}", r.text);
}

/// Modern client, Modern backend, over `gw` (`tool` the fixture's elicitation tool as
/// exposed there): sealed, then single use.
pub(crate) async fn modern_sealed_round_trip(gw: &TestGateway, tool: &str) {
    let first = input_required(&modern_call_to(gw, tool, json!({})).await);
    let retry = retry_of(&first, "Bob");
    let r = modern_call_to(gw, tool, retry.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "Hello, Bob!");
    // The same token again: replayed.
    refused(
        &modern_call_to(gw, tool, retry).await,
        "unknown_request_state",
    );
}

#[tokio::test]
async fn serve_modern_state_is_sealed_and_single_use_and_legacy_clients_are_asked() {
    let served = sdk::every_era("relay-raw").await;
    modern_sealed_round_trip(&served.gw, &format!("mod_{ELICIT}")).await;
    legacy_elicitation_round_trip(&served.gw, &format!("mod_{ELICIT}")).await;
}

#[tokio::test]
async fn run_modern_state_is_sealed_unwrapped_and_single_use() {
    let gw = modern_backend(&[]).await;
    modern_sealed_round_trip(&gw, ELICIT).await;
    // The backend's own sealed state reaches it intact inside the gateway's token.
    let tool = "test_input_required_result_request_state";
    let r = call(&gw, None, tool, json!({}), elicitation(), json!({})).await;
    let first = input_required(&r);
    let retry = json!({"inputResponses": {"confirm": {"action": "accept", "content": {"ok": true}}},
        "requestState": first["requestState"]});
    let r = call(&gw, None, tool, json!({}), elicitation(), retry).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(tool_text(&r.json()).starts_with("state-ok"), "{}", r.text);
}

#[tokio::test]
async fn tampered_and_other_calls_states_are_refused() {
    let gw = modern_backend(&[]).await;
    let first = input_required(&modern_call(&gw, None, json!({})).await);
    let mut retry = retry_of(&first, "Eve");
    let token = retry["requestState"].as_str().unwrap().to_owned();
    // One flipped character of the payload.
    let i = token.find('.').unwrap() + 5;
    let flipped = if &token[i..=i] == "A" { "B" } else { "A" };
    retry["requestState"] = json!(format!("{}{flipped}{}", &token[..i], &token[i + 1..]));
    refused(
        &modern_call(&gw, None, retry.clone()).await,
        "invalid_request_state",
    );
    // The backend's bare state (or anything not minted here) is malformed.
    retry["requestState"] = json!("st-1");
    refused(
        &modern_call(&gw, None, retry.clone()).await,
        "malformed_request_state",
    );
    // The genuine token on another tool's call.
    retry["requestState"] = json!(token);
    let other = call(
        &gw,
        None,
        "test_input_required_result_request_state",
        json!({}),
        elicitation(),
        retry.clone(),
    )
    .await;
    refused(&other, "invalid_request_state");
    // Untouched by all that, it still works once.
    let r = modern_call(&gw, None, retry).await;
    assert_eq!(tool_text(&r.json()), "Hello, Eve!", "{}", r.text);
}

#[tokio::test]
async fn another_principals_relayed_state_is_refused() {
    let dir = two_keys("relay-foreign");
    let keys = dir.join("keys");
    let gw = modern_backend(&["--api-keys-file", keys.to_str().unwrap()]).await;
    let first = input_required(&modern_call(&gw, Some(ALICE), json!({})).await);
    let retry = retry_of(&first, "Alice");
    refused(
        &modern_call(&gw, Some(BOB), retry.clone()).await,
        "invalid_request_state",
    );
    let r = modern_call(&gw, Some(ALICE), retry).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "Hello, Alice!");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_expired_relayed_state_is_refused() {
    let gw = modern_backend(&["--relay-state-ttl", "1"]).await;
    let first = input_required(&modern_call(&gw, None, json!({})).await);
    let retry = retry_of(&first, "Late");
    // Expiry is in whole seconds: past it for sure after two.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    refused(
        &modern_call(&gw, None, retry).await,
        "expired_request_state",
    );
}

/// A caller over its share of the relay's used-token table (1,024 redeemed tokens that have
/// not expired) gets the documented overload answer through the binary: HTTP 429, `Retry-After`
/// and `data.retryAfterSeconds`, never a 200.
#[tokio::test]
async fn a_caller_over_its_relay_share_is_answered_429_with_a_retry_time() {
    use futures::StreamExt;
    const SHARE: usize = 1024;
    let gw = modern_backend(&[]).await;
    let gw = &gw;
    let tokens: Vec<Value> = futures::stream::iter(0..=SHARE)
        .map(|_| async move { input_required(&modern_call(gw, None, json!({})).await) })
        .buffer_unordered(16)
        .collect()
        .await;
    let replies: Vec<Reply> = futures::stream::iter(tokens.iter())
        .map(|first| modern_call(gw, None, retry_of(first, "Many")))
        .buffer_unordered(16)
        .collect()
        .await;
    let ok = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    assert_eq!(ok, SHARE);
    let over: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status != StatusCode::OK)
        .collect();
    let [over] = over.as_slice() else {
        panic!("{} refusals", over.len())
    };
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS, "{}", over.text);
    assert_eq!(over.error_code(), 429, "{}", over.text);
    let retry = over.json()["error"]["data"]["retryAfterSeconds"].as_u64();
    let retry = retry.unwrap_or_else(|| panic!("{}", over.text));
    assert!((1..=300).contains(&retry), "{retry}");
    assert_eq!(over.headers["retry-after"], retry.to_string().as_str());
}

/// `--relay-state-ttl` outside 1..=86400 seconds is refused before anything starts (a zero
/// TTL would make every token expired at birth; a huge one pins nonces without end).
#[tokio::test]
async fn a_relay_state_ttl_out_of_range_is_refused_at_the_command_line() {
    for ttl in ["0", "86401"] {
        let out = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
                .args(["run", "--port", "0", "--relay-state-ttl", ttl])
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("exits at once")
        .unwrap();
        assert!(!out.status.success(), "{ttl}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--relay-state-ttl") && err.contains("86400"),
            "{ttl}: {err}"
        );
    }
}

/// Issue 30: `run --isolation per-session` of a Modern-only backend. Its processes answer no
/// `initialize`, so Legacy clients are served as in shared mode, through the Legacy-client
/// relay: they initialize, call tools, and are asked (on the call's own stream) for what the
/// backend's `input_required` needs, elicitation and sampling alike.
#[tokio::test]
async fn run_per_session_serves_legacy_clients_of_a_modern_only_backend() {
    let gw = modern_backend(&["--isolation", "per-session"]).await;
    let sid = legacy_session(&gw, json!({"sampling": {}})).await;
    let r = gw.post(Some(&sid), &tool_call(3, "test_simple_text")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let done = r.messages().pop().unwrap();
    assert_eq!(done["id"], 3, "{done}");
    assert!(done["result"]["content"].is_array(), "{done}");
    legacy_elicitation_round_trip(&gw, ELICIT).await;
    let ask = json!({"jsonrpc":"2.0","id":4,"method":"tools/call",
        "params":{"name":"test_sampling","arguments":{"prompt":"Capital?"}}});
    let mut stream = open_call(&gw, &sid, ask).await;
    let q = next(&mut stream).await;
    assert_eq!(q["method"], "sampling/createMessage", "{q}");
    let sample = json!({"role":"assistant","model":"m","content":{"type":"text","text":"Paris"}});
    answer(&gw, &sid, &q, sample).await;
    let done = next(&mut stream).await;
    assert_eq!(done["id"], 4, "{done}");
    assert_eq!(tool_text(&done), "LLM response: Paris", "{done}");
}
