//! Tasks across the virtual server's backends: the handles the gateway gives task owners route
//! each task method to the backend that holds the task, under that backend's own id, in both
//! eras; a caller sees and names only its own tasks.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{modern, request, serve, stdio, Served};
use crate::common::{tool_text, Reply, TestGateway};

const ALICE: &str = "alice-tasks-key-0123456789ab";
const BOB: &str = "bob-tasks-key-0123456789abcd";

/// A `backends:` entry for `backends/taskrec.py TAG`.
fn taskrec(name: &str, tag: &str) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/taskrec.py"
    );
    format!("  - name: {name}\n    command: python3\n    args: [{script}, \"{tag}\"]\n")
}

/// Three backends, the task-capable ones second and third: `alpha` (the fixture), `beta`
/// (`work_b`), `gamma` (`work_c`); alice and bob by API key.
async fn three(name: &str) -> Served {
    let yaml = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {ALICE}}}\n    - {{name: bob, key: {BOB}}}\nbackends:\n{}{}{}",
        stdio("alpha", ""),
        taskrec("beta", "b"),
        taskrec("gamma", "c"),
    );
    serve(name, &yaml, None).await
}

/// Who asks, and how.
#[derive(Clone, Copy)]
enum Who<'a> {
    /// A Legacy session of `key`'s holder.
    Session(&'a str, &'a str),
    /// A Modern (stateless) request as `key`'s holder.
    Modern(&'a str),
}

impl Who<'_> {
    async fn ask(self, gw: &TestGateway, method: &str, params: Value) -> Reply {
        match self {
            Who::Session(key, sid) => {
                let auth = format!("Bearer {key}");
                let body = request(json!("q"), method, params).to_string();
                gw.post_raw(Some(sid), body, &[("authorization", &auth)])
                    .await
            }
            Who::Modern(key) => {
                let auth = format!("Bearer {key}");
                modern(gw, json!("q"), method, params, &[("authorization", &auth)]).await
            }
        }
    }

    async fn ok(self, gw: &TestGateway, method: &str, params: Value) -> Value {
        let r = self.ask(gw, method, params).await;
        assert_eq!(r.status, StatusCode::OK, "{method}: {}", r.text);
        let v = r.json();
        assert!(v["result"].is_object(), "{method}: {v}");
        v["result"].clone()
    }

    /// A task from `tool`, task-augmented: the handle the caller got.
    async fn create(self, gw: &TestGateway, tool: &str) -> String {
        let params = json!({"name": tool, "arguments": {}, "task": {"ttl": 60000}});
        let result = self.ok(gw, "tools/call", params).await;
        let handle = result["task"]["taskId"]
            .as_str()
            .or(result["taskId"].as_str());
        handle
            .unwrap_or_else(|| panic!("no task in {result}"))
            .to_owned()
    }

    /// The caller's listed tasks: handle → the backend's tag (`statusMessage`).
    async fn listed(self, gw: &TestGateway) -> Vec<(String, String)> {
        let result = self.ok(gw, "tasks/list", json!({})).await;
        let mut out: Vec<(String, String)> = (result["tasks"].as_array())
            .unwrap_or_else(|| panic!("no list: {result}"))
            .iter()
            .map(|t| {
                (
                    t["taskId"].as_str().unwrap().to_owned(),
                    t["statusMessage"].to_string(),
                )
            })
            .collect();
        out.sort();
        out
    }
}

/// A Legacy session of `key`'s holder.
async fn session_as(gw: &TestGateway, key: &str) -> String {
    let auth = format!("Bearer {key}");
    let init = request(
        json!(0),
        "initialize",
        json!({"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}),
    );
    let r = gw
        .post_raw(None, init.to_string(), &[("authorization", &auth)])
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let done = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let r = gw
        .post_raw(Some(&sid), done.to_string(), &[("authorization", &auth)])
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    sid
}

/// The task requests backend `tag` received (listings left out), as `[method, its task id]`.
async fn seen(gw: &TestGateway, who: Who<'_>, tag: &str) -> Vec<Value> {
    let name = format!("seen_{tag}");
    let r = who
        .ok(gw, "tools/call", json!({"name": name, "arguments": {}}))
        .await;
    let text = tool_text(&json!({ "result": r })).to_owned();
    let all: Vec<Value> = serde_json::from_str(&text).unwrap();
    all.into_iter().filter(|m| m[0] != "tasks/list").collect()
}

/// Two principals create tasks on the second and third backends, interleaved, and the two
/// backends hand out the same ids (`t-1`, `t-2`): each principal lists exactly its own from
/// both backends, under handles; get, result and cancel reach the backend that holds the task
/// under that backend's own id (the backends' records say so); another principal's handle, in
/// a Legacy session or a Modern request, gets byte for byte what a handle that never existed
/// gets, and reaches no backend.
#[tokio::test]
async fn tasks_route_to_their_backend_and_stay_their_owners() {
    let served = three("tasks-across").await;
    let gw = &served.gw;
    let (sa, sb) = (session_as(gw, ALICE).await, session_as(gw, BOB).await);
    let (alice, bob) = (Who::Session(ALICE, &sa), Who::Session(BOB, &sb));
    // Interleaved: beta's t-1 is alice's and t-2 bob's; gamma's t-1 bob's and t-2 alice's.
    let a_beta = alice.create(gw, "work_b").await;
    let b_gamma = bob.create(gw, "work_c").await;
    let a_gamma = alice.create(gw, "work_c").await;
    let b_beta = bob.create(gw, "work_b").await;
    let handles = [&a_beta, &b_gamma, &a_gamma, &b_beta];
    for (i, h) in handles.iter().enumerate() {
        // The gateway's own handle (128 random bits in hex), nothing of the backend's id.
        let random = h.strip_prefix("sbt-").unwrap_or_default();
        assert!(
            random.len() == 32 && random.chars().all(|c| c.is_ascii_hexdigit()),
            "{h}"
        );
        assert!(!handles[..i].contains(h), "handles are distinct");
    }
    let mut mine = vec![
        (a_beta.clone(), "\"b\"".into()),
        (a_gamma.clone(), "\"c\"".into()),
    ];
    mine.sort();
    assert_eq!(alice.listed(gw).await, mine);
    let mut theirs = vec![
        (b_beta.clone(), "\"b\"".into()),
        (b_gamma.clone(), "\"c\"".into()),
    ];
    theirs.sort();
    assert_eq!(bob.listed(gw).await, theirs);

    // Each method reaches the task's own backend under the backend's id.
    let got = alice.ok(gw, "tasks/get", json!({"taskId": a_gamma})).await;
    assert_eq!(
        (got["taskId"].as_str(), got["statusMessage"].as_str()),
        (Some(&*a_gamma), Some("c"))
    );
    let result = alice
        .ok(gw, "tasks/result", json!({"taskId": a_beta}))
        .await;
    assert_eq!(result["content"][0]["text"], "result of t-1 at b");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(a_beta)
    );
    let cancelled = bob.ok(gw, "tasks/cancel", json!({"taskId": b_gamma})).await;
    assert_eq!(
        (cancelled["status"].as_str(), cancelled["taskId"].as_str()),
        (Some("cancelled"), Some(&*b_gamma))
    );
    let got = bob.ok(gw, "tasks/get", json!({"taskId": b_beta})).await;
    assert_eq!(
        (got["status"].as_str(), got["statusMessage"].as_str()),
        (Some("working"), Some("b"))
    );
    let on_beta = json!([["tasks/result", "t-1"], ["tasks/get", "t-2"]]);
    let on_gamma = json!([["tasks/get", "t-2"], ["tasks/cancel", "t-1"]]);
    assert_eq!(json!(seen(gw, alice, "b").await), on_beta);
    assert_eq!(json!(seen(gw, alice, "c").await), on_gamma);

    // Another principal's handle is a handle that never existed, in both eras.
    let never = format!("sbt-{}", "0".repeat(32));
    let bob_modern = Who::Modern(BOB);
    for who in [bob, bob_modern] {
        for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let foreign = who.ask(gw, m, json!({"taskId": a_beta})).await;
            let unknown = who.ask(gw, m, json!({"taskId": never})).await;
            // The Tasks extension (Modern) has no `tasks/result`.
            let code = match (who, m) {
                (Who::Modern(_), "tasks/result") => -32601,
                _ => -32602,
            };
            assert_eq!(foreign.error_code(), code, "{m}: {}", foreign.text);
            assert_eq!(
                (foreign.status, &foreign.text),
                (unknown.status, &unknown.text),
                "{m}"
            );
        }
    }
    assert_eq!(
        json!(seen(gw, alice, "b").await),
        on_beta,
        "nothing reached beta"
    );
    assert_eq!(
        json!(seen(gw, alice, "c").await),
        on_gamma,
        "nothing reached gamma"
    );
    // Nor is there a listing in Modern.
    let listed = bob_modern.ask(gw, "tasks/list", json!({})).await;
    assert_eq!(listed.error_code(), -32601, "{}", listed.text);
}

/// Three fixtures (`alpha`, `beta`, `gamma`, names prefixed) behind alice's and bob's keys.
async fn three_fixtures(name: &str) -> Served {
    let yaml = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {ALICE}}}\n    - {{name: bob, key: {BOB}}}\naggregation: {{conflictResolution: prefix, prefixFormat: \"{{backend}}_\"}}\nbackends:\n{}{}{}",
        stdio("alpha", ""),
        stdio("beta", ""),
        stdio("gamma", ""),
    );
    serve(name, &yaml, None).await
}

impl Who<'_> {
    /// A Tasks-extension task from `backend`'s `slow_compute`: the handle the caller got.
    async fn compute(self, gw: &TestGateway, backend: &str, seconds: f64, label: &str) -> String {
        let params = json!({"name": format!("{backend}_slow_compute"),
            "arguments": {"seconds": seconds, "label": label}});
        let created = self.ok(gw, "tools/call", params).await;
        assert_eq!(created["resultType"], "task", "{created}");
        let handle = created["taskId"].as_str().unwrap_or_default().to_owned();
        assert!(handle.starts_with("sbt-"), "a gateway handle: {created}");
        handle
    }

    /// `tasks/get` until the task is no longer working (10 s at most).
    async fn settled(self, gw: &TestGateway, task: &str) -> Value {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let got = self.ok(gw, "tasks/get", json!({"taskId": task})).await;
            assert_eq!(got["taskId"], json!(task), "{got}");
            if got["status"] != "working" || tokio::time::Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The Tasks extension (Modern) through the virtual server, tasks on the second and third of
/// three backends, two principals interleaved: each task method reaches the backend holding
/// the task (a fixture knows only its own tasks: anywhere else the id names nothing), the
/// result is that task's, a cancel stops that task only; another principal's handle gets byte
/// for byte the unknown-task answer and its cancel changes nothing; without the extension
/// declared the methods are -32021, and there is no `tasks/list`.
#[tokio::test]
async fn extension_tasks_route_to_their_backend_and_stay_their_owners() {
    let served = three_fixtures("tasks-extension").await;
    let gw = &served.gw;
    let (alice, bob) = (Who::Modern(ALICE), Who::Modern(BOB));
    let a_beta = alice.compute(gw, "beta", 60.0, "a-beta").await;
    let b_gamma = bob.compute(gw, "gamma", 60.0, "b-gamma").await;
    let a_gamma = alice.compute(gw, "gamma", 0.05, "a-gamma").await;
    let b_beta = bob.compute(gw, "beta", 0.05, "b-beta").await;

    for (who, task, label) in [(alice, &a_gamma, "a-gamma"), (bob, &b_beta, "b-beta")] {
        let done = who.settled(gw, task).await;
        assert_eq!(done["status"], "completed", "{done}");
        let text = done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.ends_with(&format!("({label})")), "{done}");
    }
    let never = format!("sbt-{}", "0".repeat(32));
    for m in ["tasks/get", "tasks/cancel"] {
        let foreign = bob.ask(gw, m, json!({"taskId": a_beta})).await;
        let unknown = bob.ask(gw, m, json!({"taskId": never})).await;
        assert_eq!(foreign.error_code(), -32602, "{m}: {}", foreign.text);
        assert_eq!(
            (foreign.status, &foreign.text),
            (unknown.status, &unknown.text),
            "{m}"
        );
    }
    let ack = bob.ok(gw, "tasks/cancel", json!({"taskId": b_gamma})).await;
    assert_eq!(ack["resultType"], "complete", "{ack}");
    assert_eq!(bob.settled(gw, &b_gamma).await["status"], "cancelled");
    // Bob's cancels reached neither alice's task nor the other backend's.
    let still = alice.ok(gw, "tasks/get", json!({"taskId": a_beta})).await;
    assert_eq!(still["status"], "working", "{still}");

    let listed = alice.ask(gw, "tasks/list", json!({})).await;
    assert_eq!(listed.error_code(), -32601, "{}", listed.text);
    // Without the extension declared: -32021 for a task of the caller's and for a name that
    // is none (the gateway's own answer then: it depends on the request alone).
    let auth = format!("Bearer {ALICE}");
    for task in [&a_beta, &never] {
        let undeclared = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
            "params": {"taskId": task, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}});
        let headers = [
            ("authorization", auth.as_str()),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tasks/get"),
            ("mcp-name", task.as_str()),
        ];
        let r = gw.post_raw(None, undeclared.to_string(), &headers).await;
        assert_eq!(r.error_code(), -32021, "{}", r.text);
    }
    alice
        .ok(gw, "tasks/cancel", json!({"taskId": a_beta}))
        .await;
}

/// A `backends:` entry for the fixture speaking only `era`.
fn era_fixture(name: &str, era: &str) -> String {
    let sb = env!("CARGO_BIN_EXE_switchboard");
    format!("  - name: {name}\n    command: {sb}\n    args: [fixture, --era, {era}]\n")
}

/// `tasks/get` by a Modern caller until the task's status is one of `statuses` (10 s at
/// most).
async fn modern_until(gw: &TestGateway, task: &str, statuses: &[&str]) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = modern(gw, json!("g"), "tasks/get", json!({"taskId": task}), &[]).await;
        let got = r.json()["result"].clone();
        assert_eq!(got["taskId"], json!(task), "{}", r.text);
        let reached = statuses.iter().any(|s| got["status"] == *s);
        assert!(reached || tokio::time::Instant::now() < deadline, "{got}");
        if reached {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Tasks across eras through the virtual server, the Legacy-only backend second and the
/// Modern-only one third: a Modern client's task on the Legacy backend (its question shown as
/// `inputRequests`, answered with `tasks/update`) and a Legacy session's task on the Modern
/// backend (its question asked on the session during `tasks/result`), each with one round of
/// input; neither caller can name the other's task.
#[tokio::test]
async fn tasks_cross_eras_through_the_virtual_server() {
    let yaml = format!(
        "aggregation: {{conflictResolution: prefix, prefixFormat: \"{{backend}}_\"}}\nbackends:\n{}{}{}",
        stdio("alpha", ""),
        era_fixture("old", "legacy"),
        era_fixture("new", "modern"),
    );
    let served = serve("tasks-cross-era", &yaml, None).await;
    let gw = &served.gw;

    // Declaring elicitation: the task's question is one this client can answer.
    let call = json!({"name": "old_confirm_delete", "arguments": {"filename": "x.txt"}});
    let caps = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let created = super::modern_declaring(gw, (json!(1), "tools/call"), call, caps, &[]);
    let created = created.await.json();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let modern_task = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(modern_task.starts_with("sbt-"), "{created}");
    // Its status on a listen stream too (the gateway's own `notifications/tasks`): the
    // acknowledgement names it, and where it is comes right after.
    let watch = json!({"taskIds": [modern_task]});
    let response = super::modern_listen_declaring(gw, watch).await;
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        response.bytes_stream(),
    ));
    let ack = crate::modern::next_message(&mut events).await;
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([modern_task]),
        "{ack}"
    );
    let now = crate::modern::next_message(&mut events).await;
    assert_eq!(now["method"], "notifications/tasks", "{now}");
    assert_eq!(now["params"]["taskId"], json!(modern_task), "{now}");
    let asking = modern_until(gw, &modern_task, &["input_required"]).await;
    let key = asking["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned());
    let key = key.unwrap_or_else(|| panic!("no input requests in {asking}"));
    assert_eq!(
        asking["inputRequests"][&key]["method"],
        "elicitation/create"
    );
    let answer = json!({"taskId": modern_task,
        "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}});
    let updated = modern(gw, json!(2), "tasks/update", answer, &[]).await;
    assert_eq!(
        updated.json()["result"]["resultType"],
        "complete",
        "{}",
        updated.text
    );
    let done = modern_until(gw, &modern_task, &["completed", "failed"]).await;
    assert_eq!(
        tool_text(&json!({"result": done["result"]})),
        "Deleted x.txt",
        "{done}"
    );

    let (sid, _) = crate::fixture_tasks::session(gw, json!({"elicitation": {}})).await;
    let legacy_task =
        crate::fixture_tasks::create(gw, &sid, "new_confirm_delete", json!({"filename": "y.txt"}))
            .await;
    let handle = legacy_task["taskId"].clone();
    let result = crate::fixture_tasks::request("tasks/result", json!({"taskId": handle}));
    let mut waiting = crate::per_session::open_call(gw, &sid, result).await;
    let question = crate::per_session::next(&mut waiting).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let reply = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true}}});
    assert_eq!(
        gw.post(Some(&sid), &reply).await.status,
        StatusCode::ACCEPTED
    );
    let finished = crate::per_session::next(&mut waiting).await;
    assert_eq!(tool_text(&finished), "Deleted y.txt", "{finished}");
    // The merged listing reaches the Modern backend too (the gateway's own list there).
    let list = crate::fixture_tasks::request("tasks/list", json!({}));
    let listed = gw.post(Some(&sid), &list).await.json();
    assert_eq!(listed["result"]["tasks"][0]["taskId"], handle, "{listed}");
    assert_eq!(listed["result"]["tasks"].as_array().map(Vec::len), Some(1));

    // Each caller's handle names nothing for the other: the answer a made-up one gets.
    let never = format!("sbt-{}", "0".repeat(32));
    for task in [&handle, &json!(never)] {
        let r = modern(gw, json!("x"), "tasks/get", json!({"taskId": task}), &[]).await;
        assert_eq!(r.error_code(), -32602, "{}", r.text);
    }
    let get = |task: &str| crate::fixture_tasks::request("tasks/get", json!({"taskId": task}));
    let stolen = gw.post(Some(&sid), &get(&modern_task)).await;
    let unknown = gw.post(Some(&sid), &get(&never)).await;
    assert_eq!(stolen.error_code(), -32602, "{}", stolen.text);
    assert_eq!((stolen.status, stolen.text), (unknown.status, unknown.text));
}
