//! 2025-11-25 tasks in shared mode: a task belongs to the session that created it.

use serde_json::{json, Value};

use crate::common::{emit, pushy, Listener, Reply, TestGateway};

#[tokio::test]
async fn tasks_belong_to_their_session() {
    let gw = pushy(&[]).await;
    let (a, b) = (gw.session().await, gw.session().await);
    let mut la = Listener::open(&gw, &a, None).await;
    let mut lb = Listener::open(&gw, &b, None).await;
    let create = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"work","arguments":{},"task":{"ttl":60000}}});
    let created = gw.post(Some(&a), &create).await.json();
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    let by_id =
        |m: &str, t: &str| json!({"jsonrpc":"2.0","id":"q","method":m,"params":{"taskId":t}});
    // The owner can use it.
    for m in ["tasks/get", "tasks/result"] {
        let r = gw.post(Some(&a), &by_id(m, &task_id)).await.json();
        assert!(r["result"].is_object(), "{m}: {r}");
    }
    // Anyone else gets exactly what an unknown task gets.
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let foreign = gw.post(Some(&b), &by_id(m, &task_id)).await;
        let unknown = gw.post(Some(&b), &by_id(m, "task-does-not-exist")).await;
        assert_eq!(
            (foreign.status, foreign.text.clone()),
            (unknown.status, unknown.text),
            "{m}"
        );
        assert_eq!(foreign.error_code(), -32602);
    }
    let list = |sid: &str| {
        let gw = &gw;
        let sid = sid.to_owned();
        async move {
            let r = gw
                .post(
                    Some(&sid),
                    &json!({"jsonrpc":"2.0","id":"l","method":"tasks/list"}),
                )
                .await
                .json();
            r["result"]["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["taskId"].clone())
                .collect::<Vec<Value>>()
        }
    };
    assert_eq!(list(&a).await, vec![json!(task_id)]);
    assert_eq!(list(&b).await, Vec::<Value>::new());

    // Status notifications reach the owner only (B's sentinel proves non-delivery), naming
    // the task by the handle its owner knows (the backend's own id is `task-1`: pushy's first).
    assert_ne!(task_id, "task-1", "the backend's id is not handed out");
    let status = json!({"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"task-1","status":"completed","createdAt":"x","lastUpdatedAt":"x","ttl":null}});
    let sentinel = json!({"jsonrpc":"2.0","method":"notifications/prompts/list_changed"});
    emit(&gw, &b, json!([status, sentinel])).await;
    assert_eq!(la.next().await.data["params"]["taskId"], json!(task_id));
    assert_eq!(
        la.next().await.data["method"],
        "notifications/prompts/list_changed"
    );
    assert_eq!(
        lb.next().await.data["method"],
        "notifications/prompts/list_changed"
    );

    // A status that also names another task of the backend's (in a related-task tag, under
    // `_meta` or a spelling of it a loose parser reads as `_meta`) is not passed on: that id
    // would reach the owner as it is. The sentinel after them is the owner's next message.
    let tag = json!({"io.modelcontextprotocol/related-task": {"taskId": "task-2"}});
    let mut loose = status.clone();
    loose["params"]["_META"] = tag.clone();
    let mut tagged = status.clone();
    tagged["params"]["_meta"] = tag;
    emit(&gw, &b, json!([loose, tagged, sentinel])).await;
    let next = la.next().await.data;
    assert_eq!(
        next["method"], "notifications/prompts/list_changed",
        "{next}"
    );
}

/// A stateless (Modern) caller cannot reach a session's task: the same answer as an unknown
/// task, and absent from its `tasks/list`.
#[tokio::test]
async fn modern_callers_cannot_reach_session_tasks() {
    let gw = pushy(&[]).await;
    let a = gw.session().await;
    let create = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"work","arguments":{},"task":{"ttl":60000}}});
    let task_id = gw.post(Some(&a), &create).await.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let modern = |method: &str, params: Value| {
        let mut params = params;
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":EXTENSION.clone()});
        let name = params["taskId"].as_str().map(str::to_owned);
        let body = json!({"jsonrpc":"2.0","id":"m","method":method,"params":params}).to_string();
        let method = method.to_owned();
        let gw = &gw;
        async move {
            let mut headers = vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", method.as_str()),
            ];
            if let Some(n) = name.as_deref() {
                headers.push(("mcp-name", n));
            }
            gw.post_raw(None, body, &headers).await
        }
    };
    // The Tasks extension has no `tasks/result` (nor `tasks/list`): method not found, alike.
    for (m, code) in [
        ("tasks/get", -32602),
        ("tasks/result", -32601),
        ("tasks/cancel", -32602),
    ] {
        let foreign = modern(m, json!({"taskId": task_id})).await;
        let unknown = modern(m, json!({"taskId": "task-does-not-exist"})).await;
        assert_eq!(foreign.error_code(), code, "{m}: {}", foreign.text);
        assert_eq!(
            (foreign.status, foreign.text.clone()),
            (unknown.status, unknown.text),
            "{m}: no oracle"
        );
    }
    let list = modern("tasks/list", json!({})).await;
    assert_eq!(list.error_code(), -32601, "{}", list.text);
    // The owner still has it.
    let r = gw
        .post(
            Some(&a),
            &json!({"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":task_id}}),
        )
        .await
        .json();
    assert!(r["result"].is_object(), "{r}");
}

/// How a test caller reaches the gateway: its credential and its era.
#[derive(Clone, Copy)]
struct Caller<'a> {
    /// Bearer token; `None` for an anonymous caller.
    token: Option<&'a str>,
    era: Era<'a>,
}

#[derive(Clone, Copy)]
enum Era<'a> {
    /// 2026-07-28, stateless.
    Modern,
    /// A Legacy POST without `Mcp-Session-Id`.
    Sessionless,
    /// A Legacy session.
    Session(&'a str),
}

impl Caller<'_> {
    async fn ask(&self, gw: &TestGateway, method: &str, mut params: Value) -> Reply {
        let auth = self.token.map(|t| format!("Bearer {t}"));
        let mut headers = Vec::new();
        if let Some(a) = auth.as_deref() {
            headers.push(("authorization", a));
        }
        let name = (params["name"].as_str())
            .or(params["taskId"].as_str())
            .map(str::to_owned);
        let session = match self.era {
            Era::Modern => {
                params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": EXTENSION.clone()});
                headers.push(("mcp-protocol-version", MODERN));
                headers.push(("mcp-method", method));
                if let Some(n) = name.as_deref() {
                    headers.push(("mcp-name", n));
                }
                None
            }
            Era::Sessionless => None,
            Era::Session(sid) => Some(sid),
        };
        let body = json!({"jsonrpc":"2.0","id":"q","method":method,"params":params});
        gw.post_raw(session, body.to_string(), &headers).await
    }

    /// Creates a task with the pushy backend's task-augmented `tools/call` (a Modern caller
    /// gets the Tasks extension's flat `CreateTaskResult`).
    async fn create_task(&self, gw: &TestGateway) -> String {
        let r = self.ask(gw, "tools/call", task_call()).await;
        let v = r.json();
        let task = match self.era {
            Era::Modern => {
                assert_eq!(v["result"]["resultType"], "task", "{v}");
                &v["result"]["taskId"]
            }
            _ => &v["result"]["task"]["taskId"],
        };
        task.as_str()
            .unwrap_or_else(|| panic!("no task in {v}"))
            .to_owned()
    }

    /// The task ids `tasks/list` shows this caller (none in Modern: the Tasks extension has
    /// no listing, "method not found").
    async fn listed(&self, gw: &TestGateway) -> Vec<String> {
        let r = self.ask(gw, "tasks/list", json!({})).await;
        if let Era::Modern = self.era {
            assert_eq!(r.error_code(), -32601, "{}", r.text);
            return Vec::new();
        }
        let v = r.json();
        v["result"]["tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("no list in {v}"))
            .iter()
            .map(|t| t["taskId"].as_str().unwrap().to_owned())
            .collect()
    }

    async fn status(&self, gw: &TestGateway, task: &str) -> Value {
        let v = self
            .ask(gw, "tasks/get", json!({"taskId": task}))
            .await
            .json();
        v["result"]["status"].clone()
    }
}

const MODERN: &str = "2026-07-28";

/// Modern client capabilities declaring the Tasks extension (its task methods need it).
static EXTENSION: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
const ALICE: &str = "alice-key-0123456789abcdef";
const BOB: &str = "bob-key-0123456789abcdef01";

fn task_call() -> Value {
    json!({"name":"work","arguments":{},"task":{"ttl":60000}})
}

/// pushy behind `--api-keys-file` with the principals alice and bob.
async fn pushy_with_keys() -> TestGateway {
    let dir = std::env::temp_dir().join(format!("switchboard-tasks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    pushy(&["--api-keys-file", keys.to_str().unwrap()]).await
}

/// Opens a Legacy session as `token`'s principal.
async fn session_as(gw: &TestGateway, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}});
    let r = gw
        .post_raw(None, init.to_string(), &[("authorization", auth.as_str())])
        .await;
    assert_eq!(r.status, reqwest::StatusCode::OK, "{}", r.text);
    r.headers["mcp-session-id"].to_str().unwrap().to_owned()
}

/// A task created without a session (Modern, or sessionless Legacy) belongs to the principal
/// that created it: every other caller, in either era, with or without a session, gets
/// byte for byte the answer an unknown task gets and does not see it listed; its cancel
/// attempts do not reach the backend; the owner still reads it and its result.
#[tokio::test]
async fn stateless_tasks_belong_to_their_principal() {
    let gw = pushy_with_keys().await;
    let (alice_sid, bob_sid) = (session_as(&gw, ALICE).await, session_as(&gw, BOB).await);
    let alice = |era| Caller {
        token: Some(ALICE),
        era,
    };
    let bob = |era| Caller {
        token: Some(BOB),
        era,
    };
    let modern_task = alice(Era::Modern).create_task(&gw).await;
    let legacy_task = alice(Era::Sessionless).create_task(&gw).await;
    let others = [
        bob(Era::Modern),
        bob(Era::Sessionless),
        bob(Era::Session(&bob_sid)),
        // Decision: a principal's stateless tasks are not its sessions' tasks.
        alice(Era::Session(&alice_sid)),
    ];
    for task in [&modern_task, &legacy_task] {
        for other in &others {
            for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
                let foreign = other.ask(&gw, m, json!({"taskId": task})).await;
                let unknown = other.ask(&gw, m, json!({"taskId": "task-404"})).await;
                // A Modern request has no `tasks/result` at all.
                let code = match (other.era, m) {
                    (Era::Modern, "tasks/result") => -32601,
                    _ => -32602,
                };
                assert_eq!(foreign.error_code(), code, "{m}: {}", foreign.text);
                assert_eq!(
                    (foreign.status, foreign.text),
                    (unknown.status, unknown.text),
                    "{m}: no oracle"
                );
            }
            assert!(!other.listed(&gw).await.contains(task));
        }
    }
    // Naming a task twice is naming none: a backend that kept the first duplicate would act
    // on the task the gateway did not check. The strict parse refuses the repeated key at the
    // door (400, -32602), with the same answer whoever's tasks the two ids name.
    let bob_task = bob(Era::Sessionless).create_task(&gw).await;
    let auth = format!("Bearer {BOB}");
    let twice = |m: &str, a: &str, b: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":"q","method":"{m}","params":{{"taskId":"{a}","taskId":"{b}"}}}}"#
        )
    };
    for (task, m) in [(&modern_task, "tasks/cancel"), (&legacy_task, "tasks/get")] {
        let headers = [("authorization", auth.as_str())];
        let r = gw.post_raw(None, twice(m, task, &bob_task), &headers).await;
        let unknown = gw
            .post_raw(None, twice(m, "task-404", "task-405"), &headers)
            .await;
        assert_eq!(r.status, 400, "{m}: {}", r.text);
        assert!(r.text.contains("-32602"), "{m}: {}", r.text);
        assert_eq!((r.status, r.text), (unknown.status, unknown.text), "{m}");
    }
    // The owner, in either stateless era, still has both: not cancelled, result readable
    // (listed and fetched in Legacy: the Tasks extension has neither method).
    for era in [Era::Modern, Era::Sessionless] {
        let owner = alice(era);
        for task in [&modern_task, &legacy_task] {
            assert_eq!(owner.status(&gw, task).await, "working");
        }
        if let Era::Modern = era {
            continue;
        }
        let mut listed = owner.listed(&gw).await;
        listed.sort();
        let mut mine = vec![modern_task.clone(), legacy_task.clone()];
        mine.sort();
        assert_eq!(listed, mine);
        for task in [&modern_task, &legacy_task] {
            let r = owner
                .ask(&gw, "tasks/result", json!({"taskId": task}))
                .await
                .json();
            // pushy names the task by its own id; the owner knows it by a handle only.
            let text = r["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            assert!(text.starts_with("result of task-"), "{r}");
            assert_ne!(text, format!("result of {task}"));
        }
    }
}

/// On a gateway without authentication every caller is the one anonymous principal: its
/// sessionless tasks (in both eras) are that principal's, under gateway handles, and reach
/// no session, anonymous or not; a session's task stays the session's.
#[tokio::test]
async fn anonymous_sessionless_tasks_are_the_anonymous_principals() {
    let gw = pushy(&[]).await;
    let sid = gw.session().await;
    let in_session = Caller {
        token: None,
        era: Era::Session(&sid),
    };
    let session_task = in_session.create_task(&gw).await;
    let mut made = Vec::new();
    for era in [Era::Modern, Era::Sessionless] {
        let anon = Caller { token: None, era };
        let task = anon.create_task(&gw).await;
        assert!(task.starts_with("sbt-"), "a gateway handle: {task}");
        assert_eq!(anon.status(&gw, &task).await, "working");
        made.push(task);
    }
    // Both are listed to a sessionless caller (Legacy: the extension has no listing), and
    // neither to the session, which sees its own only.
    let sessionless = Caller {
        token: None,
        era: Era::Sessionless,
    };
    let mut listed = sessionless.listed(&gw).await;
    // One pool: a sessionless Legacy caller cancels the task a Modern caller created (the
    // README's warning for `--allow-anonymous-non-loopback`).
    let cancelled = (sessionless)
        .ask(&gw, "tasks/cancel", json!({"taskId": made[0]}))
        .await;
    assert!(cancelled.json()["result"].is_object(), "{}", cancelled.text);
    listed.sort();
    made.sort();
    assert_eq!(listed, made);
    assert_eq!(in_session.listed(&gw).await, vec![session_task.clone()]);
    for task in &made {
        let foreign = in_session
            .ask(&gw, "tasks/get", json!({"taskId": task}))
            .await;
        let unknown = (in_session)
            .ask(&gw, "tasks/get", json!({"taskId": "task-404"}))
            .await;
        assert_eq!(
            (foreign.status, foreign.text),
            (unknown.status, unknown.text)
        );
    }
}

/// A status notification for a principal's stateless task has no stream to go to: it is
/// dropped, never delivered to a session (of that principal or another); a sentinel after it
/// proves it.
#[tokio::test]
async fn stateless_task_status_reaches_no_session() {
    let gw = pushy_with_keys().await;
    let (alice_sid, bob_sid) = (session_as(&gw, ALICE).await, session_as(&gw, BOB).await);
    let task = Caller {
        token: Some(ALICE),
        era: Era::Modern,
    }
    .create_task(&gw)
    .await;
    let (a_auth, b_auth) = (format!("Bearer {ALICE}"), format!("Bearer {BOB}"));
    let mut la = Listener::open_with(&gw, &alice_sid, &[("authorization", &a_auth)]).await;
    let mut lb = Listener::open_with(&gw, &bob_sid, &[("authorization", &b_auth)]).await;
    // The backend names the task by its own id (pushy's first: `task-1`), not the handle.
    assert!(task.starts_with("sbt-"), "{task}");
    let status = json!({"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"task-1","status":"completed","createdAt":"x","lastUpdatedAt":"x","ttl":null}});
    let related = json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"task-1"}}}});
    let sentinel = json!({"jsonrpc":"2.0","method":"notifications/prompts/list_changed"});
    let emit = Caller {
        token: Some(BOB),
        era: Era::Session(&bob_sid),
    }
    .ask(
        &gw,
        "tools/call",
        json!({"name":"emit","arguments":{"lines":[status, related, sentinel]}}),
    )
    .await;
    assert_eq!(emit.json()["result"]["content"][0]["text"], "emitted");
    for l in [&mut la, &mut lb] {
        assert_eq!(
            l.next().await.data["method"],
            "notifications/prompts/list_changed"
        );
    }
}

/// Through a Modern backend (pass-through), a Tasks-extension handle (`resultType: "task"`)
/// that the backend returns unasked belongs to the principal whose call got it: another
/// principal's `tasks/get` and `tasks/cancel` get exactly the unknown-task answer and never
/// reach the backend (the owner sees its task still working).
#[tokio::test]
async fn modern_task_handles_belong_to_their_principal() {
    let dir = std::env::temp_dir().join(format!("switchboard-tasky-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/tasky.py"
    );
    let gw = TestGateway::start_with(
        &["--api-keys-file", keys.to_str().unwrap()],
        &["python3", script],
    )
    .await;
    let (alice, bob) = (
        Caller {
            token: Some(ALICE),
            era: Era::Modern,
        },
        Caller {
            token: Some(BOB),
            era: Era::Modern,
        },
    );
    let created = alice
        .ask(&gw, "tools/call", json!({"name":"work","arguments":{}}))
        .await
        .json();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    for m in ["tasks/get", "tasks/cancel"] {
        let foreign = bob.ask(&gw, m, json!({"taskId": task})).await;
        let unknown = bob.ask(&gw, m, json!({"taskId": "tasky-404"})).await;
        assert_eq!(foreign.error_code(), -32602, "{m}: {}", foreign.text);
        assert_eq!(
            (foreign.status, foreign.text),
            (unknown.status, unknown.text),
            "{m}: no oracle"
        );
    }
    assert_eq!(alice.status(&gw, &task).await, "working");
}

/// pushy paging `tasks/list` one task at a time, behind `--api-keys-file` (alice and bob).
async fn paging_pushy_with_keys() -> TestGateway {
    let dir = std::env::temp_dir().join(format!("switchboard-paging-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/pushy.py"
    );
    TestGateway::start_with(
        &["--api-keys-file", keys.to_str().unwrap()],
        &["python3", script, "--task-page-1"],
    )
    .await
}

/// On a single backend too, `tasks/list` is the gateway's own list: a backend cursor (which
/// pages over everyone's tasks) never reaches a client, the owner gets all of its tasks in
/// one answer, and a cursor the gateway never gave is refused.
#[tokio::test]
async fn a_single_backend_list_gives_no_backend_cursor() {
    let gw = paging_pushy_with_keys().await;
    let bob_sid = session_as(&gw, BOB).await;
    let alice = Caller {
        token: Some(ALICE),
        era: Era::Sessionless,
    };
    let mut made = Vec::new();
    for _ in 0..3 {
        made.push(alice.create_task(&gw).await);
    }
    let bobs = [
        Caller {
            token: Some(BOB),
            era: Era::Sessionless,
        },
        Caller {
            token: Some(BOB),
            era: Era::Session(&bob_sid),
        },
    ];
    for bob in bobs {
        let v = bob.ask(&gw, "tasks/list", json!({})).await.json();
        assert_eq!(v["result"], json!({"tasks":[]}), "{v}");
    }
    let v = alice.ask(&gw, "tasks/list", json!({})).await.json();
    assert!(v["result"].get("nextCursor").is_none(), "{v}");
    let mut listed = alice.listed(&gw).await;
    listed.sort();
    made.sort();
    assert_eq!(listed, made);
    let paged = alice.ask(&gw, "tasks/list", json!({"cursor":"1"})).await;
    assert_eq!(paged.error_code(), -32602, "{}", paged.text);
}

/// Task status on a listen is the gateway's own (`task_watch`): a listen's `taskIds` (in any
/// spelling) never reach a Modern backend, which could otherwise be told another caller's
/// task id and send its status to this stream (`tagger.py` acknowledges what it received; the
/// gateway names only tasks of the caller's, and `t-1` is none), and a backend's task status
/// tagged for a listen is not delivered: the sentinel list change after it arrives alone.
#[tokio::test]
async fn a_backend_never_learns_task_ids_from_a_listen() {
    let script = format!(
        "{}/tests/integration/backends/tagger.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let gw = TestGateway::start_with(&[], &["python3", &script]).await;
    let mut streams = Vec::new();
    for key in ["taskIds", "TaskIds"] {
        let asked = json!({"toolsListChanged": true, key: ["t-1"]});
        let listen = crate::vmcp::modern_listen_declaring(&gw, asked).await;
        let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
            listen.bytes_stream(),
        ));
        let ack = crate::modern::next_message(&mut events).await;
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        let honoured = &ack["params"]["notifications"];
        assert_eq!(honoured, &json!({"toolsListChanged": true}), "{ack}");
        streams.push(events);
    }
    let call = json!({"name": "tasknote"});
    let reply = crate::modern::modern(&gw, json!(1), "tools/call", call, &[]).await;
    assert!(reply.text.contains("noted"), "{}", reply.text);
    for events in &mut streams {
        let next = crate::modern::next_message(events).await;
        assert_eq!(next["method"], "notifications/tools/list_changed", "{next}");
    }
}
