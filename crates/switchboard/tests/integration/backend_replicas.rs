//! `replicas: N` on a command backend: N processes of the built-in fixture behind one
//! backend. Each request goes to the replica with the fewest calls in flight, so holding a
//! call on one replica sends the next to another (deterministic, no sleeps); a cancellation
//! reaches the replica that has the call and no other; progress from a replica reaches the
//! caller whose call it is. `isolation: per-session` with replicas is refused.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, Listener, TestGateway};
use crate::config_file::{switchboard, text, Dir, SWITCHBOARD};

/// `serve` with one fixture backend of `replicas` processes.
async fn replicated(dir: &Dir, replicas: usize) -> TestGateway {
    let config = dir.write(
        "sb.yaml",
        &format!(
            "timeouts: {{request: 30s}}\nbackends:\n  - name: fixture\n    command: {SWITCHBOARD}\n    args: [fixture]\n    replicas: {replicas}\n"
        ),
    );
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"]);
    TestGateway::start_command(cmd).await
}

/// The fixture's `process_stats` answer (`{"pid", "cancelled"}`) from whichever replica took it.
async fn process_stats(gw: &TestGateway, session: &str) -> Value {
    let r = gw
        .call_tool(Some(session), json!("who"), "process_stats", json!({}))
        .await;
    serde_json::from_str(tool_text(&r.json())).unwrap()
}

/// A call that runs until cancelled, reporting progress under `token` every 20 ms.
fn held(id: u64, token: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"progress",
        "arguments":{"steps":1_000_000,"intervalMs":20},"_meta":{"progressToken":token}}})
}

/// Holds a call on its request stream and waits for its first progress note, which proves
/// the call is at a replica (and counted in flight there); the note carries the caller's own
/// token.
async fn hold(gw: &TestGateway, session: &str, id: u64, token: &str) -> Listener {
    let mut stream = Listener::post(gw, session, &held(id, token)).await;
    let note = stream.next().await.data;
    assert_eq!(note["method"], "notifications/progress", "{note}");
    assert_eq!(note["params"]["progressToken"], token, "{note}");
    stream
}

/// Reads a held call's stream until its answer: every progress note on the way is the
/// caller's own.
async fn answer_of(stream: &mut Listener, id: u64, token: &str) -> Value {
    loop {
        let msg = stream.next().await.data;
        if msg.get("id").is_some() {
            assert_eq!(msg["id"], id, "{msg}");
            return msg;
        }
        assert_eq!(msg["params"]["progressToken"], token, "{msg}");
    }
}

#[tokio::test]
async fn calls_go_to_the_least_busy_replica_and_cancellations_follow_them() {
    let dir = Dir::new("backend-replicas");
    let gw = replicated(&dir, 2).await;
    let (a, b) = (gw.session().await, gw.session().await);
    // Nothing in flight: the first replica answers, and takes A's held call too.
    let first = process_stats(&gw, &a).await;
    let mut held_a = hold(&gw, &a, 1, "tok-a").await;
    // The first replica is busy: the next call (B's) lands on the other process.
    let second = process_stats(&gw, &b).await;
    assert_ne!(first["pid"], second["pid"], "{first} {second}");
    let mut held_b = hold(&gw, &b, 2, "tok-b").await;

    // B cancels its call: the replica that has it hears of it, before the sentinel call
    // that follows on the same pipe (the second replica is idle again, so it takes it).
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled",
        "params":{"requestId":2,"reason":"changed my mind"}});
    assert_eq!(
        gw.post(Some(&b), &cancel).await.status,
        StatusCode::ACCEPTED
    );
    let answer = answer_of(&mut held_b, 2, "tok-b").await;
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    let after = process_stats(&gw, &b).await;
    assert_eq!(after["pid"], second["pid"], "{after}");
    assert_eq!(
        after["cancelled"], 1,
        "the second replica stopped B's call: {after}"
    );

    // The first replica heard no cancellation: with a call held on each, a tie goes to it.
    let _held_b2 = hold(&gw, &b, 3, "tok-b2").await;
    let again = process_stats(&gw, &a).await;
    assert_eq!(again["pid"], first["pid"], "{again}");
    assert_eq!(
        again["cancelled"], 0,
        "nothing reached the first replica: {again}"
    );

    // A's call is still running there, and its progress is still A's alone.
    for _ in 0..3 {
        let note = held_a.next().await.data;
        assert_eq!(note["params"]["progressToken"], "tok-a", "{note}");
    }
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled",
        "params":{"requestId":1}});
    assert_eq!(
        gw.post(Some(&a), &cancel).await.status,
        StatusCode::ACCEPTED
    );
    let answer = answer_of(&mut held_a, 1, "tok-a").await;
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
}

/// Every replica is a process of the command, each initialized before it takes a request:
/// under concurrency, calls of one client land on more than one of them.
#[tokio::test]
async fn concurrent_calls_of_one_client_spread_over_the_replicas() {
    let dir = Dir::new("backend-replicas-spread");
    let gw = replicated(&dir, 4).await;
    let a = gw.session().await;
    let mut held = Vec::new();
    let mut pids = std::collections::BTreeSet::new();
    // Each call held in turn makes its replica the busiest: the next `process_stats` goes elsewhere.
    for i in 0..3 {
        pids.insert(process_stats(&gw, &a).await["pid"].to_string());
        held.push(hold(&gw, &a, 10 + i, &format!("t{i}")).await);
    }
    pids.insert(process_stats(&gw, &a).await["pid"].to_string());
    assert_eq!(pids.len(), 4, "four replicas answered: {pids:?}");
}

/// `replicas` shares processes among every session: with `isolation: per-session` (given on
/// the backend or as the default) it is refused, as is a count out of 1..=64 and replicas of
/// a remote.
#[tokio::test]
async fn replicas_with_per_session_isolation_or_out_of_range_are_refused() {
    let dir = Dir::new("backend-replicas-refused");
    let cases = [
        (
            "backends:\n  - name: f\n    command: f\n    isolation: per-session\n    replicas: 2\n",
            "backends[0].replicas: replicas share their processes among every session, isolation: per-session gives each session a process of its own",
        ),
        (
            "isolation: per-session\nbackends:\n  - name: f\n    command: f\n    replicas: 2\n",
            "backends[0].replicas: replicas share their processes among every session",
        ),
        (
            "backends:\n  - name: f\n    command: f\n    replicas: 0\n",
            "backends[0].replicas",
        ),
        (
            "backends:\n  - name: f\n    command: f\n    replicas: 65\n",
            "backends[0].replicas",
        ),
        (
            "backends:\n  - name: r\n    url: http://127.0.0.1:9/mcp\n    replicas: 2\n",
            "backends[0].replicas: only for a command backend",
        ),
    ];
    for (yaml, want) in cases {
        let path = dir.write("sb.yaml", yaml);
        let out = switchboard(
            &["validate", "--config", path.to_str().unwrap()],
            &[],
            &dir.0,
        )
        .await;
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{yaml}: {stdout}{stderr}");
        assert!(stderr.contains(want), "{yaml}: {stderr}");
    }
    // And `serve` refuses it before starting anything.
    let path = dir.write("sb.yaml", cases[0].0);
    let out = switchboard(
        &["serve", "--config", path.to_str().unwrap(), "--port", "0"],
        &[],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("isolation: per-session"), "{stderr}");
    // One replica with per-session isolation is no contradiction.
    let path = dir.write(
        "sb.yaml",
        "backends:\n  - name: f\n    command: f\n    isolation: per-session\n    replicas: 1\n",
    );
    let out = switchboard(
        &["validate", "--config", path.to_str().unwrap()],
        &[],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
}

/// The `process_stats` answer, or `None` when the call failed (a replica that just exited).
async fn try_stats(gw: &TestGateway, session: &str) -> Option<Value> {
    let r = gw
        .call_tool(Some(session), json!("s"), "process_stats", json!({}))
        .await;
    let text = r.json()["result"]["content"][0]["text"]
        .as_str()?
        .to_owned();
    serde_json::from_str(&text).ok()
}

/// A replica that exits is restarted by its own supervisor (a new process in its place) and
/// both serve again; the set never fronts the dead process for good.
#[tokio::test]
async fn a_replica_that_exits_is_restarted_in_its_place() {
    let dir = Dir::new("backend-replicas-restart");
    let gw = replicated(&dir, 2).await;
    let a = gw.session().await;
    let dead = process_stats(&gw, &a).await["pid"].clone();
    // Idle: the same replica takes the exit.
    let _ = gw
        .call_tool(Some(&a), json!("x"), "exit", json!({"code": 3}))
        .await;
    // Until the restart, the other replica answers (or the call fails fast while the exit
    // is being noticed); then both replicas answer, neither with the dead process.
    let mut pids = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let _held = hold(&gw, &a, 20, "t-restart").await;
        if let Some(s) = try_stats(&gw, &a).await {
            assert_ne!(s["pid"], dead, "the dead process answered: {s}");
            pids.insert(s["pid"].to_string());
        }
        if let Some(s) = try_stats(&gw, &a).await {
            assert_ne!(s["pid"], dead, "{s}");
            pids.insert(s["pid"].to_string());
        }
        if pids.len() == 2 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("never two live replicas again: {pids:?}");
}

/// A task lives in one process, and its follow-ups could reach another replica, where
/// another caller's task may have the same id: a task-augmented call to a backend with
/// replicas is refused before it is sent, and with one replica it is served.
#[tokio::test]
async fn a_task_augmented_call_to_a_backend_with_replicas_is_refused() {
    let call = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{
        "name":"slow_compute","arguments":{"seconds":0.1,"label":"t"},"task":{"ttl":60000}}});
    let dir = Dir::new("backend-replicas-tasks");
    let gw = replicated(&dir, 2).await;
    // It offers no tasks either: neither the capability nor the extension.
    let (sid, init) = gw.session_with_version("2025-11-25").await;
    let caps = &init["result"]["capabilities"];
    assert!(caps.get("tasks").is_none(), "{init}");
    let discover = crate::modern::modern(&gw, json!(9), "server/discover", json!({}), &[]).await;
    let extensions = &discover.json()["result"]["capabilities"]["extensions"];
    assert!(
        extensions.get("io.modelcontextprotocol/tasks").is_none(),
        "{}",
        discover.text
    );
    let r = gw.post(Some(&sid), &call).await.json();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("replicas"), "{r}");
    assert!(r.get("result").is_none(), "{r}");
    // The same call to one replica creates a task (the refusal is about replicas only).
    let dir = Dir::new("backend-replica-tasks");
    let gw = replicated(&dir, 1).await;
    let (sid, init) = gw.session_with_version("2025-11-25").await;
    assert!(
        init["result"]["capabilities"]["tasks"].is_object(),
        "{init}"
    );
    let r = gw.post(Some(&sid), &call).await.json();
    assert_eq!(r["result"]["task"]["status"], "working", "{r}");
}

/// `serve` with the fixture (Legacy only, its tools declaring 2025-11-25 task support) as
/// backend `fixture` of `replicas` processes, and, when `merged_with_one`, a second one of one
/// process (`single`) merged with it.
async fn legacy_fixtures(dir: &Dir, replicas: usize, merged_with_one: bool) -> TestGateway {
    let backend = |name: &str, replicas: usize| {
        format!("  - name: {name}\n    command: {SWITCHBOARD}\n    args: [fixture, --era, legacy]\n    replicas: {replicas}\n")
    };
    let mut config = format!("backends:\n{}", backend("fixture", replicas));
    if merged_with_one {
        config.push_str(&backend("single", 1));
    }
    let config = dir.write("sb.yaml", &config);
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"]);
    TestGateway::start_command(cmd).await
}

/// Each tool of `gw`'s `tools/list` with its `execution.taskSupport` (null: none), as a
/// Legacy client and as a Modern one (declaring the Tasks extension) get them.
async fn task_support(gw: &TestGateway) -> [Vec<(String, Value)>; 2] {
    let (sid, _) = gw.session_with_version("2025-11-25").await;
    let list = json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}});
    let legacy = gw.post(Some(&sid), &list).await.json();
    let modern = crate::vmcp::modern(gw, json!(4), "tools/list", json!({}), &[]).await;
    let modern = modern.json();
    [legacy, modern].map(|answer| {
        let tools = answer["result"]["tools"].as_array().cloned();
        let tools = tools.unwrap_or_else(|| panic!("{answer}"));
        let support = |t: &Value| t["execution"]["taskSupport"].clone();
        let name = |t: &Value| t["name"].as_str().unwrap_or_default().to_owned();
        tools.iter().map(|t| (name(t), support(t))).collect()
    })
}

/// A backend with replicas runs no tool as a task (a task lives in one process): its
/// `tools/list` says none does, to a Legacy client and a Modern one alike, whether its list
/// passes through (one backend) or is merged with another's. The same tools of a backend of
/// one process say that some do.
#[tokio::test]
async fn tools_of_a_backend_with_replicas_run_none_as_a_task() {
    let offered = |t: &(String, Value)| t.1 == "optional" || t.1 == "required";
    let dir = Dir::new("backend-replicas-tools");
    let one = legacy_fixtures(&dir, 1, false).await;
    for (era, tools) in ["legacy", "modern"].iter().zip(task_support(&one).await) {
        assert!(tools.iter().any(offered), "{era}, one process: {tools:?}");
    }
    let dir = Dir::new("backend-replicas-tools-2");
    let two = legacy_fixtures(&dir, 2, false).await;
    // Every era's and path's tools that say otherwise, all told at once.
    let mut wrong = Vec::new();
    for (era, tools) in ["legacy", "modern"].iter().zip(task_support(&two).await) {
        assert!(!tools.is_empty(), "{era}");
        let said = tools.into_iter().filter(|t| !t.1.is_null());
        wrong.extend(said.map(|t| (*era, "one backend", t)));
    }
    // Merged: the colliding names are prefixed with their backend's.
    let dir = Dir::new("backend-replicas-tools-merged");
    let merged = legacy_fixtures(&dir, 2, true).await;
    for (era, tools) in ["legacy", "modern"].iter().zip(task_support(&merged).await) {
        let (replicated, single): (Vec<_>, Vec<_>) =
            tools.into_iter().partition(|t| t.0.starts_with("fixture_"));
        assert!(single.iter().any(offered), "{era}, merged: {single:?}");
        assert!(!replicated.is_empty(), "{era}, merged: {single:?}");
        let said = replicated.into_iter().filter(|t| !t.1.is_null());
        wrong.extend(said.map(|t| (*era, "merged", t)));
    }
    assert!(
        wrong.is_empty(),
        "tools of a backend with replicas: {wrong:#?}"
    );
}
