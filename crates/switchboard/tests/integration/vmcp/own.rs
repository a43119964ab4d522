//! Per-session backends in a set: an `isolation: per-session` stdio backend and a Legacy-only
//! remote give each Legacy session an upstream of its own, opened the first time the session
//! uses that backend; shared backends stay shared. What such a backend asks the client reaches
//! the session whose upstream asked, and a dead one is replaced without ending the session.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{call_text, remote, serve, stdio, Era, Served};
use crate::common::{process_running, tool_text, TestGateway};
use crate::fixture_http::FixtureHttp;
use crate::per_session::{next, open_call};

/// `alpha` a shared fixture, `beta` a per-session fixture, `gamma` a Legacy-only remote
/// fixture: every name collides, so each is prefixed with its backend's name.
async fn mixed(name: &str) -> Served {
    let gamma = FixtureHttp::start(&["--era", "legacy"]).await;
    let yaml = format!(
        "timeouts: {{request: 30s}}\nbackends:\n{}{}{}",
        stdio("alpha", ""),
        stdio("beta", "    isolation: per-session\n"),
        remote("gamma", &gamma.url)
    );
    serve(name, &yaml, Some(gamma)).await
}

/// A Legacy session that declares elicitation (so a backend may ask it).
async fn session(gw: &TestGateway) -> String {
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},
        "clientInfo":{"name":"it","version":"0"}}});
    let r = gw.post(None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // The gateway answers for the virtual server (no backend was asked).
    assert_eq!(r.json()["result"]["serverInfo"]["name"], "switchboard");
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(
        gw.post(Some(&sid), &note).await.status,
        StatusCode::ACCEPTED
    );
    sid
}

async fn text(gw: &TestGateway, sid: &str, tool: &str) -> String {
    call_text(gw, Era::Legacy, Some(sid), tool, json!({})).await
}

#[tokio::test]
async fn each_session_gets_its_own_upstream_on_per_session_backends_and_shares_the_rest() {
    let served = mixed("own-upstreams").await;
    let gw = &served.gw;
    let (a, b) = (session(gw).await, session(gw).await);
    let (a_pid, b_pid) = (
        text(gw, &a, "beta_pid").await,
        text(gw, &b, "beta_pid").await,
    );
    assert_ne!(a_pid, b_pid, "two sessions, one process");
    assert_eq!(
        text(gw, &a, "beta_pid").await,
        a_pid,
        "reopened per request"
    );
    // The shared backend is one process for everyone, neither session's own.
    let shared = text(gw, &a, "alpha_pid").await;
    assert_eq!(text(gw, &b, "alpha_pid").await, shared);
    assert!(shared != a_pid && shared != b_pid);
    // The Legacy-only remote: an upstream session per client session.
    let (a_inst, b_inst) = (
        text(gw, &a, "gamma_instance").await,
        text(gw, &b, "gamma_instance").await,
    );
    assert_ne!(a_inst, b_inst);
    assert_eq!(text(gw, &a, "gamma_instance").await, a_inst);
    // A Modern request is no session's: it never reaches either session's process.
    let modern = call_text(gw, Era::Modern, None, "beta_pid", json!({})).await;
    assert!(modern != a_pid && modern != b_pid, "{modern}");

    // Concurrent first requests of a session open one process, not four.
    let c = session(gw).await;
    let pids = futures::future::join_all((0..4).map(|_| text(gw, &c, "beta_pid"))).await;
    assert!(pids.iter().all(|p| p == &pids[0]), "{pids:?}");
    assert!(![&a_pid, &b_pid].contains(&&pids[0]));

    // Ending a session stops its own process.
    let r = gw
        .http
        .delete(&gw.url)
        .header("mcp-session-id", &a)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while process_running(&a_pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{a_pid} outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(process_running(&b_pid));
}

#[tokio::test]
async fn what_a_per_session_backend_asks_reaches_the_session_it_belongs_to() {
    let served = mixed("own-asks").await;
    let gw = &served.gw;
    let (a, b) = (session(gw).await, session(gw).await);
    let elicit = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"beta_trigger","arguments":{"kind":"elicitation"}}});
    let (mut sa, mut sb) =
        tokio::join!(open_call(gw, &a, elicit.clone()), open_call(gw, &b, elicit));
    let (qa, qb) = tokio::join!(next(&mut sa), next(&mut sb));
    for q in [&qa, &qb] {
        assert_eq!(q["method"], "elicitation/create", "{q}");
    }
    assert_ne!(qa["id"], qb["id"]);
    let answer = |id: &Value, who: &str| json!({"jsonrpc":"2.0","id":id,"result":{"action":"accept","content":{"who":who}}});
    // B answering A's question is refused and changes nothing.
    let forged = gw.post(Some(&b), &answer(&qa["id"], "forged")).await;
    assert_eq!(forged.status, StatusCode::BAD_REQUEST, "{}", forged.text);
    for (sid, q, who) in [(&a, &qa, "a"), (&b, &qb, "b")] {
        let r = gw.post(Some(sid), &answer(&q["id"], who)).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    }
    for (stream, who) in [(&mut sa, "a"), (&mut sb, "b")] {
        let done = next(stream).await;
        assert_eq!(done["id"], 1);
        let report: Value = serde_json::from_str(tool_text(&done)).unwrap();
        assert_eq!(
            report["answer"]["result"]["content"]["who"], who,
            "{report}"
        );
    }
}

#[tokio::test]
async fn a_dead_own_process_is_replaced_and_the_session_lives_on() {
    let served = mixed("own-dies").await;
    let gw = &served.gw;
    let a = session(gw).await;
    let first = text(gw, &a, "beta_pid").await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &first])
        .status()
        .unwrap();
    assert!(killed.success());
    // Until the death is noticed a call may fail (naming the backend); the session is never
    // ended, and the next call after that runs on a fresh process.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let fresh = loop {
        let params = json!({"name": "beta_pid", "arguments": {}});
        let r = gw
            .post(
                Some(&a),
                &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":params}),
            )
            .await;
        assert_ne!(
            r.status,
            StatusCode::NOT_FOUND,
            "the session ended: {}",
            r.text
        );
        let body = r.json();
        if body["result"].is_object() {
            break tool_text(&body).to_owned();
        }
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("beta"), "{body}");
        assert!(tokio::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_ne!(fresh, first);
    assert_eq!(text(gw, &a, "beta_pid").await, fresh);
    // The other backends never noticed.
    assert!(text(gw, &a, "alpha_pid").await.parse::<u32>().is_ok());
}

/// A Legacy-only per-session fixture named `name`, whose `env WHO` answers its name.
fn legacy_own(name: &str) -> String {
    format!(
        "  - name: {name}\n    command: {}\n    args: [fixture, --era, legacy]\n    isolation: per-session\n    env: {{WHO: {name}}}\n",
        super::SB
    )
}

/// Modern callers run on a partition per (principal, backend, capabilities): a call to one
/// Legacy-only backend never runs on another's partition, in either order, with or without
/// input capabilities declared (each a partition of its own).
#[tokio::test]
async fn modern_calls_run_on_a_partition_of_the_backend_they_name() {
    let yaml = format!("backends:\n{}{}", legacy_own("beta"), legacy_own("delta"));
    let served = serve("own-partitions", &yaml, None).await;
    let gw = &served.gw;
    for round in 0..2 {
        for who in ["beta", "delta", "beta"] {
            let tool = format!("{who}_env");
            let answer = call_text(gw, Era::Modern, None, &tool, json!({"name": "WHO"})).await;
            assert_eq!(answer, who, "round {round}: {tool} ran elsewhere");
        }
    }
    // The same through the MRTR path: a call that declares an input capability.
    for who in ["delta", "beta"] {
        let params = json!({"name": format!("{who}_env"), "arguments": {"name": "WHO"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": super::V,
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
        let body = super::request(json!(7), "tools/call", params);
        let name = format!("{who}_env");
        let headers = [
            ("mcp-protocol-version", super::V),
            ("mcp-method", "tools/call"),
            ("mcp-name", name.as_str()),
        ];
        let r = gw.post_raw(None, body.to_string(), &headers).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(tool_text(&r.json()), who, "{}", r.text);
    }
    // And a Legacy session's own processes are per backend too.
    let sid = session(gw).await;
    for who in ["delta", "beta"] {
        let args = json!({"name": "WHO"});
        let answer = call_text(gw, Era::Legacy, Some(&sid), &format!("{who}_env"), args).await;
        assert_eq!(answer, who);
    }
}
