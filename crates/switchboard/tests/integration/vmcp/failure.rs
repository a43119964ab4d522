//! Many clients on many backends at once (colliding ids never cross), and one backend dying
//! while the others keep serving.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::{call_text, modern, request, tool_names, trio, Era};
use crate::common::{tool_text, TestGateway};

const SESSIONS: usize = 8;
const IDS: u64 = 6;

/// One call with client id `id`; returns the text it was answered with.
async fn echo(
    gw: &TestGateway,
    era: Era,
    sid: Option<&str>,
    id: u64,
    tool: &str,
    text: &str,
) -> String {
    // Later ids answer sooner, so answers come back in another order than they were asked.
    let args = json!({"text": text, "delayMs": (IDS - id) * 15});
    let params = json!({"name": tool, "arguments": args});
    let r = match era {
        Era::Legacy => {
            gw.post(sid, &request(json!(id), "tools/call", params))
                .await
        }
        Era::Modern => modern(gw, json!(id), "tools/call", params, &[]).await,
    };
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let answer = r.json();
    assert_eq!(
        answer["id"],
        json!(id),
        "the client's id comes back exactly"
    );
    tool_text(&answer).to_owned()
}

#[tokio::test]
async fn colliding_ids_across_sessions_and_backends_never_cross() {
    let served = trio("ids", "").await;
    let gw = &served.gw;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(gw.session().await);
    }
    for era in [Era::Legacy, Era::Modern] {
        let mut calls = Vec::new();
        for (n, sid) in sessions.iter().enumerate() {
            for id in 1..=IDS {
                for tool in ["alpha_echo", "beta_echo"] {
                    let text = format!("{era:?} session {n} id {id} via {tool}");
                    let sid = (era == Era::Legacy).then_some(sid.as_str());
                    calls.push(async move { (echo(gw, era, sid, id, tool, &text).await, text) });
                }
            }
        }
        let answers =
            tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(calls))
                .await
                .expect("every call answered within 60s");
        assert_eq!(answers.len(), SESSIONS * IDS as usize * 2);
        for (got, sent) in answers {
            assert_eq!(got, sent, "{era:?}: an answer reached the wrong caller");
        }
    }
}

/// Calls `tool` until it answers (bounded); every failure on the way must be fast and name
/// the backend. Returns the answer.
async fn until_answered(gw: &TestGateway, sid: &str, tool: &str, backend: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let started = Instant::now();
        let r = gw
            .call_tool(Some(sid), json!("retry"), tool, json!({}))
            .await;
        let answer = r.json();
        if answer.get("result").is_some() {
            return tool_text(&answer).to_owned();
        }
        // Fast: far below the 30 s request timeout; and the message says which backend.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slow failure: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(backend),
            "{answer} does not name {backend}"
        );
        assert!(
            Instant::now() < deadline,
            "{tool} did not answer again within 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Beta and gamma answer while alpha is down, in both eras (gamma: the same instance).
async fn others_keep_answering(gw: &TestGateway, sid: &str, alpha_pid: &str, gamma: &str) {
    for era in [Era::Legacy, Era::Modern] {
        let s = (era == Era::Legacy).then_some(sid);
        let beta = call_text(gw, era, s, "beta_pid", json!({})).await;
        assert_ne!(beta, alpha_pid);
        let echoed = call_text(gw, era, s, "gamma_echo", json!({"text": "still here"})).await;
        assert_eq!(echoed, "still here");
    }
    let again = call_text(gw, Era::Legacy, Some(sid), "gamma_instance", json!({})).await;
    assert_eq!(again, gamma);
}

#[tokio::test]
async fn a_dead_backend_fails_fast_by_name_and_comes_back_under_the_same_names() {
    let served = trio("dead", "").await;
    let gw = &served.gw;
    let sid = gw.session().await;
    let before = tool_names(gw, Era::Legacy, Some(&sid)).await;
    let old_pid = call_text(gw, Era::Legacy, Some(&sid), "alpha_pid", json!({})).await;
    let gamma = call_text(gw, Era::Legacy, Some(&sid), "gamma_instance", json!({})).await;

    // The fixture exits without answering: the call resolves (fast) with alpha's failure.
    let started = Instant::now();
    let r = gw
        .call_tool(Some(&sid), json!("bye"), "alpha_exit", json!({}))
        .await;
    let died = r.json();
    assert!(started.elapsed() < Duration::from_secs(5), "{died}");
    assert_eq!(died["id"], "bye");
    assert!(
        died["error"]["message"].as_str().unwrap().contains("alpha"),
        "{died}"
    );
    // HTTP 200: the endpoint is fine, one of its servers is not (a 5xx would end an SDK
    // client's session, and with it every other backend).
    assert_eq!(r.status, StatusCode::OK, "{died}");
    assert_eq!(died["error"]["code"], -32603, "{died}");

    others_keep_answering(gw, &sid, &old_pid, &gamma).await;

    // The supervisor restarts it: a new process under the same names (nobody was renamed
    // while it was down, and nobody is after).
    let new_pid = until_answered(gw, &sid, "alpha_pid", "alpha").await;
    assert_ne!(new_pid, old_pid, "the answer came from a new process");
    let after = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert_eq!(after, before);
    let modern_after = tool_names(gw, Era::Modern, None).await;
    assert_eq!(modern_after, before);
}

/// A backend that declares no prompts is not asked for them: with `failureMode: fail`, the
/// merged `prompts/list` is the others' prompts, not a failure (a tools-only server answers
/// `prompts/list` with -32601, which says nothing about its health).
#[tokio::test]
async fn a_kind_a_backend_does_not_declare_is_not_a_failure() {
    let yaml = format!(
        "aggregation: {{failureMode: fail}}\nbackends:\n{}{}",
        super::stdio("alpha", ""),
        super::growy("growy", 3, 10)
    );
    let served = super::serve("undeclared", &yaml, None).await;
    let gw = &served.gw;
    let sid = gw.session().await;
    for era in [Era::Legacy, Era::Modern] {
        let (prompts, _) = super::list_all(gw, era, Some(&sid), "prompts/list", "prompts").await;
        let names = super::names(&prompts);
        assert!(
            names.contains(&"test_simple_prompt".to_owned()),
            "{era:?}: {names:?}"
        );
        // Growy's tools are listed beside alpha's: its tools are declared and fetched.
        assert!(tool_names(gw, era, Some(&sid))
            .await
            .contains(&"g0000".to_owned()));
    }
}
