//! The Cedar policy reloads: by a config rewrite naming another policy file, and by SIGHUP
//! after the policy file itself changed (the watcher watches only the config file).

use reqwest::StatusCode;
use serde_json::json;

use super::{config_of, hangup, rewrite, BOUND, RELOADED};
use crate::common::{Listener, TestGateway};
use crate::vmcp::{call_text, request, serve, stdio, tool_names, Dir, Era};

/// Everything, except calling `pid`.
const FORBID_PID: &str = "permit(principal, action, resource);\n\
forbid(principal, action == Action::\"call_tool\", resource == Tool::\"pid\");\n";
const PERMIT_ALL: &str = "permit(principal, action, resource);\n";

/// One fixture (`keep`, names bare) under the policy at `policy`.
fn config(policy: &std::path::Path) -> String {
    format!(
        "policy: {{file: {}}}\nbackends:\n{}",
        policy.display(),
        stdio("keep", "")
    )
}

/// `pid` is refused exactly as a missing tool is, and not listed.
async fn pid_forbidden(gw: &TestGateway, sid: &str, what: &str) {
    let call = |name: &str| {
        request(
            json!(1),
            "tools/call",
            json!({"name": name, "arguments": {}}),
        )
    };
    let r = gw.post(Some(sid), &call("pid")).await;
    let missing = gw.post(Some(sid), &call("nosuch")).await;
    assert_eq!(r.status, StatusCode::OK, "{what}: {}", r.text);
    assert_eq!(r.error_code(), -32602, "{what}: {}", r.text);
    assert_eq!(
        r.text.replace("pid", "NAME"),
        missing.text.replace("nosuch", "NAME")
    );
    let names = tool_names(gw, Era::Legacy, Some(sid)).await;
    assert!(!names.iter().any(|n| n == "pid"), "{what}: {names:?}");
    assert!(names.iter().any(|n| n == "echo"), "{what}: {names:?}");
}

/// `pid` is listed and answers.
async fn pid_permitted(gw: &TestGateway, sid: &str, what: &str) {
    let names = tool_names(gw, Era::Legacy, Some(sid)).await;
    assert!(names.iter().any(|n| n == "pid"), "{what}: {names:?}");
    let pid = call_text(gw, Era::Legacy, Some(sid), "pid", json!({})).await;
    assert!(pid.parse::<u32>().is_ok(), "{what}: {pid}");
}

#[tokio::test]
async fn a_reloaded_policy_permits_and_forbids_again() {
    let policies = Dir::new("reload-policy");
    let strict = policies.write("strict.cedar", FORBID_PID);
    let open = policies.write("open.cedar", PERMIT_ALL);
    let served = serve("reload-policy", &config(&strict), None).await;
    let gw = &served.gw;
    let sid = gw.session().await;
    pid_forbidden(gw, &sid, "at start").await;

    // The config now names the permissive file: the poll reloads it.
    rewrite(&config_of(&served._dir), &config(&open));
    gw.wait_stdout(RELOADED, BOUND).await;
    pid_permitted(gw, &sid, "after the config named the open policy").await;

    // The policy file itself changes (the config does not): SIGHUP reloads it.
    policies.write("open.cedar", FORBID_PID);
    hangup(gw);
    gw.wait_stdout(RELOADED, BOUND).await;
    pid_forbidden(gw, &sid, "after SIGHUP with the policy file changed").await;
}

/// Everything; subscribing to the watched resource too, or not.
fn subscribe_policy(watched_allowed: bool) -> String {
    let mut p = PERMIT_ALL.to_owned();
    if !watched_allowed {
        p.push_str(
            "forbid(principal, action == Action::\"subscribe\", resource == Resource::\"test://watched-resource\");\n",
        );
    }
    p
}

/// A subscription admitted under the old policy is judged again when the policy changes: one
/// the new policy denies is dropped, so its updates stop; another one keeps its updates (the
/// sentinel that proves, by order, that the dropped one's update was not delivered).
#[tokio::test]
async fn a_reloaded_policy_drops_the_subscriptions_it_denies() {
    subscriptions_are_judged_again("reload-policy-subs", "").await;
}

async fn subscriptions_are_judged_again(name: &str, settings: &str) {
    let policies = Dir::new(name);
    let file = policies.write("p.cedar", &subscribe_policy(true));
    let yaml = format!(
        "policy: {{file: {}}}\nbackends:\n{}",
        file.display(),
        stdio("keep", settings)
    );
    let served = serve(name, &yaml, None).await;
    let gw = &served.gw;
    let sid = gw.session().await;
    for uri in ["test://watched-resource", "test://static-text"] {
        let sub = request(json!(uri), "resources/subscribe", json!({ "uri": uri }));
        let r = gw.post(Some(&sid), &sub).await;
        assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    }
    let mut listener = Listener::open(gw, &sid, None).await;
    let trigger = |uri: &str| {
        request(
            json!(uri),
            "tools/call",
            json!({"name": "trigger", "arguments": {"kind": "resource_updated", "uri": uri}}),
        )
    };
    let updated = |e: &crate::common::Event| {
        (e.data["method"] == "notifications/resources/updated").then(|| {
            e.data["params"]["uri"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
    };
    gw.post(Some(&sid), &trigger("test://watched-resource"))
        .await;
    loop {
        if updated(&listener.next().await).as_deref() == Some("test://watched-resource") {
            break;
        }
    }

    policies.write("p.cedar", &subscribe_policy(false));
    hangup(gw);
    gw.wait_stdout(RELOADED, BOUND).await;
    gw.post(Some(&sid), &trigger("test://watched-resource"))
        .await;
    gw.post(Some(&sid), &trigger("test://static-text")).await;
    loop {
        match updated(&listener.next().await).as_deref() {
            Some("test://static-text") => break,
            Some(other) => panic!("an update for {other} after its subscription was denied"),
            None => {}
        }
    }
}

/// A Modern listen stream's resource subscription admitted under the old policy is judged
/// again when the policy changes: a URI the new one denies stops reaching the stream, while
/// another keeps its updates (the sentinel that proves the order).
#[tokio::test]
async fn a_reloaded_policy_revokes_the_listen_subscriptions_it_denies() {
    let policies = Dir::new("reload-policy-listen");
    let file = policies.write("p.cedar", &subscribe_policy(true));
    let served = serve("reload-policy-listen", &config(&file), None).await;
    let gw = &served.gw;
    let resp = crate::vmcp::modern_listen(
        gw,
        json!({"resourceSubscriptions": ["test://watched-resource", "test://static-text"]}),
    )
    .await;
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ));
    let ack = crate::modern::next_message(&mut events).await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let sid = gw.session().await;
    let trigger = |uri: &str| {
        request(
            json!(uri),
            "tools/call",
            json!({"name": "trigger", "arguments": {"kind": "resource_updated", "uri": uri}}),
        )
    };
    policies.write("p.cedar", &subscribe_policy(false));
    hangup(gw);
    gw.wait_stdout(RELOADED, BOUND).await;
    gw.post(Some(&sid), &trigger("test://watched-resource"))
        .await;
    gw.post(Some(&sid), &trigger("test://static-text")).await;
    loop {
        let e = crate::modern::next_message(&mut events).await;
        if e["method"] != "notifications/resources/updated" {
            continue;
        }
        match e["params"]["uri"].as_str() {
            Some("test://static-text") => break,
            other => panic!("an update for {other:?} after the policy revoked it"),
        }
    }
}

/// A subscription held by a session's own process (per-session isolation) is judged again
/// when the policy changes: the process still sends the update, on the triggering call's own
/// stream, and the gateway withholds it, while another URI's update still arrives. The call's
/// result, after its notifications on the same stream, proves by order that nothing was held
/// back for later (found by review: these subscriptions were never judged again).
#[tokio::test]
async fn a_reloaded_policy_revokes_a_per_session_processs_subscriptions() {
    let policies = Dir::new("reload-policy-own");
    let file = policies.write("p.cedar", &subscribe_policy(true));
    let yaml = format!(
        "policy: {{file: {}}}\nbackends:\n{}",
        file.display(),
        stdio("keep", "    isolation: per-session\n")
    );
    let served = serve("reload-policy-own", &yaml, None).await;
    let gw = &served.gw;
    let sid = gw.session().await;
    for uri in ["test://watched-resource", "test://static-text"] {
        let sub = request(json!(uri), "resources/subscribe", json!({ "uri": uri }));
        let r = gw.post(Some(&sid), &sub).await;
        assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    }
    // The updates a trigger call's own answer carries, before its result.
    let updates_on_call = |uri: &'static str| {
        let body = request(
            json!(uri),
            "tools/call",
            json!({"name": "trigger", "arguments": {"kind": "resource_updated", "uri": uri}}),
        );
        let sid = sid.clone();
        async move {
            let r = gw.post(Some(&sid), &body).await;
            let messages = r.messages();
            assert!(
                messages.last().is_some_and(|m| m.get("result").is_some()),
                "the call's result closes its stream: {}",
                r.text
            );
            messages
                .iter()
                .filter(|m| m["method"] == "notifications/resources/updated")
                .map(|m| m["params"]["uri"].as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        updates_on_call("test://watched-resource").await,
        ["test://watched-resource"]
    );
    policies.write("p.cedar", &subscribe_policy(false));
    hangup(gw);
    gw.wait_stdout(RELOADED, BOUND).await;
    assert_eq!(
        updates_on_call("test://watched-resource").await,
        Vec::<String>::new(),
        "withheld after the policy revoked it"
    );
    assert_eq!(
        updates_on_call("test://static-text").await,
        ["test://static-text"]
    );
}
