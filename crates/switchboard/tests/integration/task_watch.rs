//! Task status on a Modern `subscriptions/listen` stream (the Tasks extension's
//! `notifications/tasks`, asked for with `notifications.taskIds`), which the gateway serves
//! itself from the caller's own `tasks/get`: for a task on a Modern backend and for one it
//! runs on a Legacy backend's 2025-11-25 tasks, a round of input included. Only the caller's
//! own tasks are acknowledged and reported.

use serde_json::{json, Value};

use crate::common::{tool_text, Reply, TestGateway};

const V: &str = "2026-07-28";
const ALICE: &str = "alice-watch-key-0123456789ab";
const BOB: &str = "bob-watch-key-0123456789abcd";

type Events = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>,
>;

/// `run` in front of the fixture speaking only `era`, alice and bob by API key.
async fn gateway(era: &str) -> TestGateway {
    let dir = std::env::temp_dir().join(format!("sb-watch-{era}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let args = ["--api-keys-file", keys.to_str().unwrap()];
    TestGateway::start_with(&args, &[sb, "fixture", "--era", era]).await
}

fn meta(extension: bool) -> Value {
    let caps = match extension {
        true => json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}),
        false => json!({}),
    };
    json!({"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": caps})
}

/// A Modern request of `key`'s holder declaring the Tasks extension.
async fn ask(gw: &TestGateway, key: &str, method: &str, mut params: Value) -> Reply {
    params["_meta"] = meta(true);
    let name = (params["name"].as_str())
        .or(params["taskId"].as_str())
        .map(str::to_owned);
    let auth = format!("Bearer {key}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("mcp-protocol-version", V),
        ("mcp-method", method),
    ];
    if let Some(n) = name.as_deref() {
        headers.push(("mcp-name", n));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    gw.post_raw(None, body.to_string(), &headers).await
}

/// A task of `key`'s holder: its handle.
async fn create(gw: &TestGateway, key: &str, tool: &str, arguments: Value) -> String {
    let r = ask(
        gw,
        key,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    let v = r.json();
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    v["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A listen of `key`'s holder for `notifications`, `extension` declared or not.
async fn listen_raw(
    gw: &TestGateway,
    key: &str,
    notifications: Value,
    extension: bool,
) -> reqwest::Response {
    let caps = meta(extension)["io.modelcontextprotocol/clientCapabilities"].clone();
    crate::vmcp::listen_with(gw, notifications, caps, Some(key)).await
}

/// A listen of `key`'s holder for the status of `tasks`: its events after the
/// acknowledgement, and the task ids the acknowledgement names.
async fn listen(gw: &TestGateway, key: &str, tasks: &[&str]) -> (Events, Value) {
    let asked = json!({"toolsListChanged": true, "taskIds": tasks});
    let response = listen_raw(gw, key, asked, true).await;
    let mut events: Events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        response.bytes_stream(),
    ));
    let ack = crate::modern::next_message(&mut events).await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let agreed = ack["params"]["notifications"]["taskIds"].clone();
    (events, agreed)
}

/// The next task status on `events`.
async fn status(events: &mut Events) -> Value {
    loop {
        let m = crate::modern::next_message(events).await;
        if m["method"] == "notifications/tasks" {
            assert_eq!(
                m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
                "L"
            );
            return m["params"].clone();
        }
    }
}

#[tokio::test]
async fn task_status_reaches_its_owners_listen_for_either_backend_era() {
    for era in ["modern", "legacy"] {
        let gw = gateway(era).await;
        let quick = create(
            &gw,
            ALICE,
            "slow_compute",
            json!({"seconds": 1.0, "label": "a"}),
        )
        .await;
        let confirm = create(&gw, ALICE, "confirm_delete", json!({"filename": "z.txt"})).await;
        let bobs = create(
            &gw,
            BOB,
            "slow_compute",
            json!({"seconds": 4.0, "label": "b"}),
        )
        .await;

        // Bob asks for alice's task and his own: only his own is his to watch.
        let (mut bob, agreed) = listen(&gw, BOB, &[&quick, &bobs]).await;
        assert_eq!(agreed, json!([bobs]), "{era}");
        let (mut alice, agreed) = listen(&gw, ALICE, &[&quick, &confirm, "sbt-nothing"]).await;
        assert_eq!(agreed, json!([quick, confirm]), "{era}");

        // Alice hears both of hers: the question as `inputRequests`, answered with
        // `tasks/update`, and each task's end with its result.
        let mut ended = Vec::new();
        while ended.len() < 2 {
            let task = status(&mut alice).await;
            let handle = task["taskId"].as_str().unwrap_or_default().to_owned();
            assert!(handle == quick || handle == confirm, "{era}: {task}");
            match task["status"].as_str() {
                Some("input_required") => {
                    let key = task["inputRequests"]
                        .as_object()
                        .and_then(|m| m.keys().next().cloned());
                    let key = key.unwrap_or_else(|| panic!("{era}: {task}"));
                    let answer = json!({"taskId": confirm, "inputResponses":
                        {key: {"action": "accept", "content": {"confirm": true}}}});
                    let r = ask(&gw, ALICE, "tasks/update", answer).await;
                    assert_eq!(r.json()["result"]["resultType"], "complete", "{}", r.text);
                }
                Some("completed") => ended.push((
                    handle,
                    tool_text(&json!({"result": task["result"]})).to_owned(),
                )),
                Some("working") => {}
                _ => panic!("{era}: {task}"),
            }
        }
        ended.sort();
        let mut expected = vec![
            (quick.clone(), "Computed for 1 s (a)".to_owned()),
            (confirm.clone(), "Deleted z.txt".to_owned()),
        ];
        expected.sort();
        assert_eq!(ended, expected, "{era}");

        // Alice's tasks ended long before bob's: had her status reached his stream, it would
        // come before his task's end. His own is all he hears: where it was, then its end.
        for expected in ["working", "completed"] {
            let his = status(&mut bob).await;
            assert_eq!(his["taskId"], json!(bobs), "{era}: {his}");
            assert_eq!(his["status"], expected, "{era}: {his}");
        }
    }
}

/// Asking for task status without declaring the extension is refused (-32021).
#[tokio::test]
async fn task_status_needs_the_extension() {
    let gw = gateway("modern").await;
    let asked = json!({"taskIds": ["sbt-nothing"]});
    let r = listen_raw(&gw, ALICE, asked, false).await;
    let text = r.text().await.unwrap();
    assert!(text.contains("-32021"), "{text}");
    // The listen's answer travels on its stream: the one message there.
    let data = crate::common::sse_data(&text);
    assert_eq!(data.len(), 1, "{text}");
    let answer: Value = serde_json::from_str(&data[0]).unwrap_or(Value::Null);
    assert_eq!(answer["error"]["code"], -32021, "{text}");
    assert_eq!(answer["id"], "L", "{text}");
}

/// A listen whose watched tasks have all ended holds none of its principal's places: after
/// four such listens (kept open), a fifth still gets its task watched.
#[tokio::test]
async fn a_listen_watching_nothing_any_more_gives_its_place_back() {
    let gw = gateway("modern").await;
    let quick = create(&gw, ALICE, "slow_compute", json!({"seconds": 0.05})).await;
    let long = create(&gw, ALICE, "slow_compute", json!({"seconds": 30})).await;
    let mut open = Vec::new();
    for _ in 0..4 {
        let (mut events, agreed) = listen(&gw, ALICE, &[&quick]).await;
        assert_eq!(agreed, json!([quick]));
        // Its one task has ended (or ends): sent once, and no longer watched.
        loop {
            let state = status(&mut events).await;
            if state["status"] == "completed" {
                break;
            }
        }
        open.push(events);
    }
    let (_events, agreed) = listen(&gw, ALICE, &[&long]).await;
    assert_eq!(agreed, json!([long]));
}

/// How many `tasks/get` requests the gateway has served (`/metrics`), the polls of watched
/// listens included: each is admitted, counted and audited as a request of its caller's.
async fn task_gets(gw: &TestGateway) -> u64 {
    let r = gw
        .http
        .get(format!("{}/metrics", gw.base()))
        .bearer_auth(ALICE);
    let text = r.send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("switchboard_requests_total{"))
        .filter(|l| l.contains(r#"mcp_method_name="tasks/get""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A watched listen polls its tasks only once it was accepted: one its backend refuses (an
/// invalid filter) asks no `tasks/get` for them; the same listen made valid is
/// acknowledged with the task, having polled it.
#[tokio::test]
async fn a_refused_listen_polls_none_of_its_tasks() {
    let gw = gateway("modern").await;
    let task = create(&gw, ALICE, "slow_compute", json!({"seconds": 30})).await;
    let before = task_gets(&gw).await;
    let invalid = json!({"taskIds": [task], "resourceSubscriptions": "not a list"});
    let text = listen_raw(&gw, ALICE, invalid, true)
        .await
        .text()
        .await
        .unwrap();
    let data = crate::common::sse_data(&text);
    let answer: Value = serde_json::from_str(data.last().map_or("", |d| d)).unwrap_or_default();
    assert_eq!(answer["error"]["code"], -32602, "{text}");
    assert_eq!(
        task_gets(&gw).await,
        before,
        "polled for a refused listen: {text}"
    );
    let (_events, agreed) = listen(&gw, ALICE, &[&task]).await;
    assert_eq!(agreed, json!([task]));
    assert!(
        task_gets(&gw).await > before,
        "the valid listen's poll is counted"
    );
}

/// A listen whose token has just expired (within the gateway's clock-skew leeway, so it is
/// still let in) gets no task status: nothing is polled as a caller past its token's expiry,
/// not even to agree on the watch. The same listen with a fresh token of the same subject
/// watches the task.
#[tokio::test]
async fn a_listen_past_its_tokens_expiry_polls_nothing() {
    let jwks = crate::auth::Jwks::serve(&["k1"]).await;
    let dir = std::env::temp_dir().join(format!("sb-watch-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("alice:{ALICE}\n")).unwrap();
    let args = crate::acting::incoming(&jwks.url, keys.to_str().unwrap());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let gw = TestGateway::start_with(&args, &[sb, "fixture", "--era", "modern"]).await;
    let fresh = crate::auth::sign("k1", &crate::auth::claims("carol"));
    let mut claims = crate::auth::claims("carol");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    claims["exp"] = json!(now - 5);
    let expired = crate::auth::sign("k1", &claims);
    // A NumericDate with a fraction is a date too (RFC 7519): just as expired.
    claims["exp"] = json!(now as f64 - 4.5);
    let fractional = crate::auth::sign("k1", &claims);
    let task = create(&gw, &fresh, "slow_compute", json!({"seconds": 30})).await;
    let before = task_gets(&gw).await;
    for token in [&expired, &fractional] {
        let (_events, agreed) = listen(&gw, token, &[&task]).await;
        assert!(
            agreed.as_array().is_none_or(Vec::is_empty),
            "a listen past its token's expiry watches {agreed}"
        );
        assert_eq!(
            task_gets(&gw).await,
            before,
            "polled past the token's expiry"
        );
    }
    let (_events, agreed) = listen(&gw, &fresh, &[&task]).await;
    assert_eq!(agreed, json!([task]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run` in front of `held_poll.py` (a Modern backend whose task polls the test holds open),
/// alice by API key.
async fn held_poll() -> TestGateway {
    let dir = std::env::temp_dir().join(format!("sb-watch-held-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("alice:{ALICE}\n")).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/held_poll.py"
    );
    let args = ["--api-keys-file", keys.to_str().unwrap()];
    TestGateway::start_with(&args, &["python3", script]).await
}

/// A round of polls never holds up the listen it serves: while the backend holds the watched
/// task's `tasks/get` open, more messages than a watched listen queues (64) reach its client,
/// in order, and then a sentinel; only then is the poll answered, and the task's end follows.
/// Each burst is sent while the poll is held (the backend waits for it to be), and read before
/// the next one is asked for, so none could overflow a listen that is being read.
#[tokio::test]
async fn a_held_poll_never_holds_up_its_listen() {
    const BURST: u64 = 30;
    const BURSTS: u64 = 3;
    let gw = held_poll().await;
    let task = create(&gw, ALICE, "work", json!({})).await;
    let (mut events, agreed) = listen(&gw, ALICE, &[&task]).await;
    assert_eq!(agreed, json!([task]));
    assert_eq!(status(&mut events).await["status"], "working");
    for b in 0..BURSTS {
        let last = b + 1 == BURSTS;
        let arguments = json!({"count": BURST, "sentinel": last});
        let r = ask(
            &gw,
            ALICE,
            "tools/call",
            json!({"name": "burst", "arguments": arguments}),
        )
        .await;
        assert_eq!(tool_text(&r.json()), "sent", "{}", r.text);
        for n in b * BURST..(b + 1) * BURST {
            let m = crate::modern::next_message(&mut events).await;
            assert_eq!(m["method"], "notifications/message", "{n}: {m}");
            assert_eq!(m["params"]["data"], n, "{m}");
        }
    }
    let sentinel = crate::modern::next_message(&mut events).await;
    assert_eq!(
        sentinel["method"], "notifications/tools/list_changed",
        "{sentinel}"
    );
    // Only now is the poll answered: what it found still reaches the listen.
    let release = json!({"name": "release", "arguments": {}});
    let r = ask(&gw, ALICE, "tools/call", release).await;
    assert_eq!(tool_text(&r.json()), "released", "{}", r.text);
    let end = status(&mut events).await;
    assert_eq!(
        (&end["taskId"], &end["status"]),
        (&json!(task), &json!("completed"))
    );
}
