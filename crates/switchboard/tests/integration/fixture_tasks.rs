//! 2025-11-25 tasks in the built-in fixture, through `switchboard run`: the `tasks`
//! capability, `execution.taskSupport`, a task-augmented `tools/call`, `tasks/get`,
//! `tasks/result` (blocking), `tasks/list`, `tasks/cancel`, a failed task's error, and one
//! round of input inside a task (the fixture's elicitation to the session, tagged with the
//! task, the task `input_required` meanwhile).

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, Listener, Reply, TestGateway};
use crate::per_session::{next, open_call};

pub(crate) fn request(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "q", "method": method, "params": params})
}

async fn ask(gw: &TestGateway, sid: &str, method: &str, params: Value) -> Reply {
    gw.post(Some(sid), &request(method, params)).await
}

async fn ok(gw: &TestGateway, sid: &str, method: &str, params: Value) -> Value {
    let r = ask(gw, sid, method, params).await;
    assert_eq!(r.status, StatusCode::OK, "{method}: {}", r.text);
    let v = r.json();
    assert!(v["result"].is_object(), "{method}: {v}");
    v["result"].clone()
}

/// A task from `tool` with `arguments`, task-augmented: its `Task`.
pub(crate) async fn create(gw: &TestGateway, sid: &str, tool: &str, arguments: Value) -> Value {
    let params = json!({"name": tool, "arguments": arguments, "task": {"ttl": 60000}});
    let created = ok(gw, sid, "tools/call", params).await;
    assert_eq!(created["task"]["status"], "working", "{created}");
    assert!(created["task"]["taskId"].is_string(), "{created}");
    created["task"].clone()
}

/// A Legacy session declaring `capabilities`.
pub(crate) async fn session(gw: &TestGateway, capabilities: Value) -> (String, Value) {
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities": capabilities,
        "clientInfo":{"name":"it","version":"0"}}});
    let r = gw.post(None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let done = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    gw.post(Some(&sid), &done).await;
    (sid, r.json()["result"].clone())
}

#[tokio::test]
async fn the_fixture_runs_2025_11_25_tasks() {
    let gw = TestGateway::start(&[]).await;
    let (sid, init) = session(&gw, json!({})).await;
    let caps = &init["capabilities"]["tasks"];
    assert!(
        caps["list"].is_object() && caps["cancel"].is_object(),
        "{init}"
    );
    assert!(caps["requests"]["tools"]["call"].is_object(), "{init}");
    let tools = ok(&gw, &sid, "tools/list", json!({})).await;
    let slow = (tools["tools"].as_array().unwrap().iter())
        .find(|t| t["name"] == "slow_compute")
        .cloned()
        .unwrap_or_default();
    assert_eq!(slow["execution"]["taskSupport"], "optional", "{slow}");

    let quick = create(
        &gw,
        &sid,
        "slow_compute",
        json!({"seconds": 0.3, "label": "q"}),
    )
    .await;
    let long = create(
        &gw,
        &sid,
        "slow_compute",
        json!({"seconds": 60, "label": "l"}),
    )
    .await;
    let (quick, long) = (&quick["taskId"], &long["taskId"]);
    let got = ok(&gw, &sid, "tasks/get", json!({"taskId": quick})).await;
    assert_eq!(&got["taskId"], quick, "{got}");
    assert!(
        got["createdAt"].is_string() && got["ttl"].is_number(),
        "{got}"
    );
    // `tasks/result` waits for the task to end.
    let result = ok(&gw, &sid, "tasks/result", json!({"taskId": quick})).await;
    assert_eq!(
        tool_text(&json!({ "result": result })),
        "Computed for 0.3 s (q)"
    );
    let done = ok(&gw, &sid, "tasks/get", json!({"taskId": quick})).await;
    assert_eq!(done["status"], "completed", "{done}");

    let listed = ok(&gw, &sid, "tasks/list", json!({})).await;
    let ids: Vec<&Value> = (listed["tasks"].as_array().unwrap().iter())
        .map(|t| &t["taskId"])
        .collect();
    assert!(ids.contains(&quick) && ids.contains(&long), "{listed}");

    let cancelled = ok(&gw, &sid, "tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let again = ask(&gw, &sid, "tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(again.error_code(), -32602, "an ended task: {}", again.text);

    let failing = create(&gw, &sid, "protocol_error_job", json!({})).await;
    let failed = ask(
        &gw,
        &sid,
        "tasks/result",
        json!({"taskId": failing["taskId"]}),
    )
    .await;
    assert_eq!(failed.error_code(), -32603, "{}", failed.text);
    let status = ok(&gw, &sid, "tasks/get", json!({"taskId": failing["taskId"]})).await;
    assert_eq!(status["status"], "failed", "{status}");
}

/// One round of input inside a task: with a process of its own (per-session), and on the
/// shared process (where the gateway sends a question tagged with a session's task to that
/// session, under the task's handle), `confirm_delete` as a task asks the client on the
/// session's listen stream, tagged with the task, while `tasks/get` says `input_required`;
/// the answer lets it finish.
#[tokio::test]
async fn a_fixture_task_asks_its_client_for_input() {
    asks_its_client_for_input(&["--isolation", "per-session"]).await;
    asks_its_client_for_input(&[]).await;
}

async fn asks_its_client_for_input(args: &[&str]) {
    let gw = TestGateway::start(args).await;
    let (sid, _) = session(&gw, json!({"elicitation": {}})).await;
    let mut listen = Listener::open(&gw, &sid, None).await;
    // The question may travel on the call's own stream (still open when the job asks) or,
    // after it, on the session's listen stream.
    let (mut task, mut question) = (Value::Null, Value::Null);
    if args.is_empty() {
        // Shared: the call is answered as plain JSON; the question comes on the listen.
        task = create(&gw, &sid, "confirm_delete", json!({"filename": "a.txt"})).await;
    } else {
        let params = json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"},
            "task": {"ttl": 60000}});
        let mut call = open_call(&gw, &sid, request("tools/call", params)).await;
        while task.is_null() {
            let msg = next(&mut call).await;
            match msg["method"].is_string() {
                true => question = msg,
                false => task = msg["result"]["task"].clone(),
            }
        }
    }
    if question.is_null() {
        question = listen.next().await.data;
    }
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let related = &question["params"]["_meta"]["io.modelcontextprotocol/related-task"];
    assert_eq!(related["taskId"], task["taskId"], "{question}");
    let waiting = ok(&gw, &sid, "tasks/get", json!({"taskId": task["taskId"]})).await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");

    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true}}});
    assert_eq!(
        gw.post(Some(&sid), &answer).await.status,
        StatusCode::ACCEPTED
    );
    let result = ok(&gw, &sid, "tasks/result", json!({"taskId": task["taskId"]})).await;
    assert_eq!(tool_text(&json!({ "result": result })), "Deleted a.txt");
}

/// Cross-era: a Legacy client's 2025-11-25 tasks on a Modern-only backend (the fixture with
/// the Tasks extension), bridged by the gateway: the task is created under a handle,
/// `tasks/get` shows a Legacy `Task`, `tasks/result` is the gateway polling the extension's
/// `tasks/get` (the backend has no `tasks/result`), one round of input inside the task is
/// asked of the client on its session (tagged with the handle) and handed to the backend with
/// `tasks/update`, `tasks/cancel` stops the task; another session gets the unknown-task answer.
#[tokio::test]
async fn a_legacy_client_polls_a_task_a_modern_backend_created() {
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let gw = TestGateway::start_with(&[], &[sb, "fixture", "--era", "modern"]).await;
    let (sid, _) = session(&gw, json!({"elicitation": {}})).await;
    let (other, _) = session(&gw, json!({})).await;

    let quick = create(
        &gw,
        &sid,
        "slow_compute",
        json!({"seconds": 0.3, "label": "m"}),
    )
    .await;
    let handle = quick["taskId"].as_str().unwrap_or_default().to_owned();
    assert!(
        handle.starts_with("sbt-") && quick["ttl"].is_number(),
        "{quick}"
    );
    assert!(
        quick.get("resultType").is_none() && quick.get("ttlMs").is_none(),
        "{quick}"
    );
    let got = ok(&gw, &sid, "tasks/get", json!({"taskId": handle})).await;
    assert_eq!(got["taskId"], json!(handle), "{got}");
    assert!(got.get("result").is_none(), "a Legacy Task: {got}");
    let result = ok(&gw, &sid, "tasks/result", json!({"taskId": handle})).await;
    assert_eq!(
        tool_text(&json!({ "result": result })),
        "Computed for 0.3 s (m)"
    );
    let related = &result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"];
    assert_eq!(related, &json!(handle), "{result}");

    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let stolen = ask(&gw, &other, m, json!({"taskId": handle})).await;
        let unknown = ask(&gw, &other, m, json!({"taskId": "sbt-nothing"})).await;
        assert_eq!(stolen.error_code(), -32602, "{m}: {}", stolen.text);
        assert_eq!(
            (stolen.status, &stolen.text),
            (unknown.status, &unknown.text),
            "{m}"
        );
    }

    let confirm = create(&gw, &sid, "confirm_delete", json!({"filename": "b.txt"})).await;
    let mut waiting = open_call(
        &gw,
        &sid,
        request("tasks/result", json!({"taskId": confirm["taskId"]})),
    )
    .await;
    let question = next(&mut waiting).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let related = &question["params"]["_meta"]["io.modelcontextprotocol/related-task"];
    assert_eq!(related["taskId"], confirm["taskId"], "{question}");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true}}});
    assert_eq!(
        gw.post(Some(&sid), &answer).await.status,
        StatusCode::ACCEPTED
    );
    let done = next(&mut waiting).await;
    assert_eq!(tool_text(&done), "Deleted b.txt", "{done}");

    let long = create(&gw, &sid, "slow_compute", json!({"seconds": 60})).await;
    let cancelled = ok(&gw, &sid, "tasks/cancel", json!({"taskId": long["taskId"]})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["taskId"], long["taskId"], "{cancelled}");

    // The extension has no listing: the gateway lists the session's own tasks, each as the
    // backend's `tasks/get` says it is now, under its handle; another session has none.
    let listed = ok(&gw, &sid, "tasks/list", json!({})).await;
    let tasks = listed["tasks"].as_array().cloned().unwrap_or_default();
    let ids: Vec<&Value> = tasks.iter().map(|t| &t["taskId"]).collect();
    assert_eq!(
        ids,
        vec![&json!(handle), &confirm["taskId"], &long["taskId"]],
        "{listed}"
    );
    assert_eq!(tasks[0]["status"], "completed", "{listed}");
    assert_eq!(tasks[2]["status"], "cancelled", "{listed}");
    assert!(
        tasks[0].get("result").is_none() && tasks[0]["ttl"].is_number(),
        "{listed}"
    );
    let theirs = ok(&gw, &other, "tasks/list", json!({})).await;
    assert_eq!(theirs["tasks"], json!([]), "{theirs}");
}

/// A Modern request declaring the Tasks extension (and elicitation), with its headers.
async fn modern(gw: &TestGateway, method: &str, params: Value) -> Reply {
    let caps = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    modern_declaring(gw, method, params, caps).await
}

/// A Modern request declaring client capabilities `caps`, with its headers.
async fn modern_declaring(gw: &TestGateway, method: &str, mut params: Value, caps: Value) -> Reply {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps});
    let name = (params["name"].as_str())
        .or(params["taskId"].as_str())
        .map(str::to_owned);
    let mut headers = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(n) = name.as_deref() {
        headers.push(("mcp-name", n));
    }
    let body = json!({"jsonrpc": "2.0", "id": "m", "method": method, "params": params});
    gw.post_raw(None, body.to_string(), &headers).await
}

async fn modern_ok(gw: &TestGateway, method: &str, params: Value) -> Value {
    let r = modern(gw, method, params).await;
    assert_eq!(r.status, StatusCode::OK, "{method}: {}", r.text);
    // The fixture's own task ids (`task-…`) never reach the client.
    assert!(!r.text.contains("\"task-"), "{method}: {}", r.text);
    let v = r.json();
    assert_eq!(v["result"]["resultType"], "complete", "{method}: {v}");
    v["result"].clone()
}

/// `tasks/get` until the task's status is one of `statuses` (bounded: the fixture's tasks
/// here end or ask within a second).
async fn modern_poll(gw: &TestGateway, handle: &str, statuses: &[&str]) -> Value {
    for _ in 0..200 {
        let got = modern_ok(gw, "tasks/get", json!({"taskId": handle})).await;
        assert_eq!(got["taskId"], json!(handle), "{got}");
        if statuses.iter().any(|s| got["status"] == *s) {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("task {handle} never reached {statuses:?}");
}

/// A Modern call of `tool` that the Legacy backend runs as a task: the extension's
/// `CreateTaskResult`, named by a gateway handle.
async fn modern_task(gw: &TestGateway, tool: &str, arguments: Value) -> String {
    let r = modern(
        gw,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(!r.text.contains("\"task-"), "{}", r.text);
    let created = r.json()["result"].clone();
    assert_eq!(created["resultType"], "task", "{created}");
    assert!(
        created["ttlMs"].is_number() && created.get("task").is_none(),
        "{created}"
    );
    let handle = created["taskId"].as_str().unwrap_or_default().to_owned();
    assert!(handle.starts_with("sbt-"), "{created}");
    handle
}

#[tokio::test]
async fn a_modern_client_polls_a_task_a_legacy_backend_created() {
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let gw = TestGateway::start_with(&[], &[sb, "fixture", "--era", "legacy"]).await;

    // A task-capable tool called by a client declaring the extension runs as a task; its
    // outcome is inlined by `tasks/get` once it ends.
    let quick = modern_task(&gw, "slow_compute", json!({"seconds": 0.2, "label": "m"})).await;
    let done = modern_poll(&gw, &quick, &["completed"]).await;
    assert_eq!(
        tool_text(&json!({"result": done["result"]})),
        "Computed for 0.2 s (m)",
        "{done}"
    );
    assert!(
        done["ttlMs"].is_number() && done.get("ttl").is_none(),
        "{done}"
    );

    // One round of input inside the task: the backend's elicitation is the task's
    // `inputRequests`, answered by `tasks/update`.
    let confirm = modern_task(&gw, "confirm_delete", json!({"filename": "b.txt"})).await;
    let asking = modern_poll(&gw, &confirm, &["input_required"]).await;
    let requests = asking["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(requests.len(), 1, "{asking}");
    let (key, question) = requests
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert_eq!(question["params"]["message"], "Delete b.txt?", "{question}");
    let related = &question["params"]["_meta"]["io.modelcontextprotocol/related-task"];
    assert_eq!(related["taskId"], json!(confirm), "{question}");
    let answer = json!({key.clone(): {"action": "accept", "content": {"confirm": true}}});
    modern_ok(
        &gw,
        "tasks/update",
        json!({"taskId": confirm, "inputResponses": answer}),
    )
    .await;
    let done = modern_poll(&gw, &confirm, &["completed", "failed"]).await;
    assert_eq!(
        tool_text(&json!({"result": done["result"]})),
        "Deleted b.txt",
        "{done}"
    );
    assert!(done.get("inputRequests").is_none(), "{done}");

    // An answer that is not a result object is refused, and the question still waits.
    let again = modern_task(&gw, "confirm_delete", json!({"filename": "c.txt"})).await;
    let asking = modern_poll(&gw, &again, &["input_required"]).await;
    let key = asking["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned());
    let bad = json!({"taskId": again, "inputResponses": {key.clone().unwrap_or_default(): 7}});
    let refused = modern(&gw, "tasks/update", bad).await;
    assert_eq!(refused.error_code(), -32602, "{}", refused.text);
    let still = modern_poll(&gw, &again, &["input_required"]).await;
    assert_eq!(still["inputRequests"], asking["inputRequests"], "{still}");
    let decline = json!({key.unwrap_or_default(): {"action": "decline"}});
    modern_ok(
        &gw,
        "tasks/update",
        json!({"taskId": again, "inputResponses": decline}),
    )
    .await;
    let done = modern_poll(&gw, &again, &["completed"]).await;
    assert_eq!(
        tool_text(&json!({"result": done["result"]})),
        "Kept c.txt",
        "{done}"
    );

    // Cancelled through the backend's own `tasks/cancel`.
    let long = modern_task(&gw, "slow_compute", json!({"seconds": 60})).await;
    modern_ok(&gw, "tasks/cancel", json!({"taskId": long})).await;
    modern_poll(&gw, &long, &["cancelled"]).await;

    // A Legacy session naming the Modern caller's handle gets what a made-up one gets.
    let (sid, _) = session(&gw, json!({})).await;
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let stolen = ask(&gw, &sid, m, json!({"taskId": confirm})).await;
        let unknown = ask(&gw, &sid, m, json!({"taskId": "sbt-nothing"})).await;
        assert_eq!(stolen.error_code(), -32602, "{m}: {}", stolen.text);
        assert_eq!(
            (stolen.status, &stolen.text),
            (unknown.status, &unknown.text),
            "{m}"
        );
    }
}

/// Per-session mode keeps a Modern caller's calls on its own process: a task-capable tool is
/// run there, synchronously, unless the client asked for a task (which the shared process,
/// where the gateway tracks task owners, runs).
#[tokio::test]
async fn per_session_mode_runs_a_task_only_when_asked() {
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let args = ["--isolation", "per-session"];
    let gw = TestGateway::start_with(&args, &[sb, "fixture", "--era", "legacy"]).await;
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 0.05, "label": "p"}});
    let r = modern(&gw, "tools/call", call).await;
    let v = r.json();
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert_eq!(tool_text(&v), "Computed for 0.05 s (p)", "{v}");
    let asked = json!({"name": "slow_compute", "arguments": {"seconds": 0.05}, "task": {}});
    let v = modern(&gw, "tools/call", asked).await.json();
    assert_eq!(v["result"]["resultType"], "task", "{v}");
}

/// A task's question the Modern client did not declare it can answer (no `elicitation`) is
/// refused to the backend, never shown as `inputRequests`: the fixture's task then ends on
/// its own terms.
#[tokio::test]
async fn a_question_the_modern_client_cannot_answer_is_refused() {
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let gw = TestGateway::start_with(&[], &[sb, "fixture", "--era", "legacy"]).await;
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let call = json!({"name": "confirm_delete", "arguments": {"filename": "d.txt"}});
    let created = modern_declaring(&gw, "tools/call", call, caps).await.json();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let handle = created["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let done = modern_poll(&gw, &handle, &["completed", "failed", "input_required"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    let text = tool_text(&json!({"result": done["result"]})).to_owned();
    assert_eq!(
        text, "client answered elicitation/create with an error",
        "{done}"
    );
}
