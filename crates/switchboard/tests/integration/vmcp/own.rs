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

/// A Legacy stdio backend that records what reaches it (for the attacker review of issue 14):
/// `tools/list` is one tool, `stats`, answering what it saw (subscribe/unsubscribe per URI,
/// setLevel calls); `resources/list` lists `file:///w` and `file:///c`. With a directory
/// argument, an `initialize` from a client that calls itself `gated` first creates
/// `DIR/got-init`, then is answered only once `DIR/go` exists (bounded: 20 s), so a test can
/// act while a session's own upstream is handshaking, and know that it is.
const RECORDER: &str = r#"
import json, os, sys, time
DIR = sys.argv[1] if len(sys.argv) > 1 else None
state = {"subscribe": [], "unsubscribe": [], "setLevel": []}
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def ok(rid, res):
    send({"jsonrpc": "2.0", "id": rid, "result": res})
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    m, rid, p = msg["method"], msg["id"], msg.get("params") or {}
    if m == "initialize":
        if DIR and (p.get("clientInfo") or {}).get("name") == "gated":
            open(os.path.join(DIR, "got-init"), "w").close()
            deadline = time.time() + 20
            while not os.path.exists(os.path.join(DIR, "go")) and time.time() < deadline:
                time.sleep(0.01)
        ok(rid, {"protocolVersion": "2025-11-25", "serverInfo": {"name": "rec", "version": "1"},
                 "capabilities": {"tools": {}, "logging": {}, "resources": {"subscribe": True}}})
    elif m == "tools/list":
        ok(rid, {"tools": [{"name": "stats", "inputSchema": {"type": "object"}}]})
    elif m == "resources/list":
        ok(rid, {"resources": [{"uri": "file:///w", "name": "w"}, {"uri": "file:///c", "name": "c"}]})
    elif m == "resources/templates/list":
        ok(rid, {"resourceTemplates": []})
    elif m in ("resources/subscribe", "resources/unsubscribe"):
        state[m.split("/")[1]].append(p.get("uri")); ok(rid, {})
    elif m == "logging/setLevel":
        state["setLevel"].append(p.get("level")); ok(rid, {})
    elif m == "tools/call" and p.get("name") == "stats":
        ok(rid, {"content": [{"type": "text", "text": json.dumps(state)}]})
    elif m == "ping":
        ok(rid, {})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "nope"}})
"#;

/// A `backends:` entry running [`RECORDER`] (written into `dir`), with extra settings lines.
fn recorder(dir: &super::Dir, name: &str, settings: &str) -> String {
    let script = dir.write("recorder.py", RECORDER);
    let gate = dir.0.display();
    format!(
        "  - name: {name}\n    command: python3\n    args: [{}, {gate}]\n{settings}",
        script.display()
    )
}

async fn stats(gw: &TestGateway, sid: &str) -> Value {
    serde_json::from_str(&text(gw, sid, "stats").await).unwrap()
}

async fn delete(gw: &TestGateway, sid: &str) {
    let r = gw
        .http
        .delete(&gw.url)
        .header("mcp-session-id", sid)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
}

/// A session that used a per-session backend still used the shared ones: when it ends, its
/// subscriptions and log level there are released as any other session's (DELETE answers
/// after the release, so the recorder has seen it by the next call). Fails while
/// `release` returns early for any session with a process of its own.
#[tokio::test]
async fn a_session_with_an_own_upstream_releases_its_shared_backends_state_when_it_ends() {
    let dir = super::Dir::new("own-release-script");
    let yaml = format!(
        "backends:\n{}{}",
        recorder(&dir, "rec", ""),
        stdio("beta", "    isolation: per-session\n")
    );
    let served = serve("own-release", &yaml, None).await;
    let gw = &served.gw;
    let sub = |uri: &str| json!({"jsonrpc":"2.0","id":"s","method":"resources/subscribe","params":{"uri":uri}});
    let level = |l: &str| json!({"jsonrpc":"2.0","id":"l","method":"logging/setLevel","params":{"level":l}});
    let watcher = session(gw).await;
    // Control: a session with no own upstream is released (subscription and level).
    let c = session(gw).await;
    for body in [sub("file:///c"), level("debug")] {
        let r = gw.post(Some(&c), &body).await;
        assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    }
    delete(gw, &c).await;
    let after_control = stats(gw, &watcher).await;
    assert_eq!(
        after_control["unsubscribe"],
        json!(["file:///c"]),
        "{after_control}"
    );
    let levels = after_control["setLevel"].as_array().unwrap().len();
    assert_eq!(
        levels, 2,
        "set, then reconciled on the end: {after_control}"
    );

    // The same, by a session that also opened its own process on `beta`.
    let a = session(gw).await;
    assert!(text(gw, &a, "pid").await.parse::<u32>().is_ok());
    for body in [sub("file:///w"), level("info")] {
        let r = gw.post(Some(&a), &body).await;
        assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    }
    delete(gw, &a).await;
    let after = stats(gw, &watcher).await;
    assert_eq!(
        after["unsubscribe"],
        json!(["file:///c", "file:///w"]),
        "the ended session is still the shared backend's subscriber: {after}"
    );
    assert_eq!(
        after["setLevel"].as_array().unwrap().len(),
        levels + 2,
        "the ended session's level still rules the shared backend: {after}"
    );
}

/// `logging/setLevel` answered while the session's own upstream is handshaking: the level is
/// stored, the fan-out skips the not-ready upstream, and the handshake must then apply it.
/// Fails while `open_own` reads the level before spawning (the stale one is applied).
#[tokio::test]
async fn a_level_set_while_an_own_upstream_opens_reaches_it() {
    let dir = super::Dir::new("own-level-script");
    let yaml = format!(
        "backends:\n{}{}",
        stdio("alpha", ""),
        recorder(&dir, "rec", "    isolation: per-session\n")
    );
    let served = serve("own-level", &yaml, None).await;
    let gw = &served.gw;
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"gated","version":"0"}}});
    let r = gw.post(None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(
        gw.post(Some(&sid), &note).await.status,
        StatusCode::ACCEPTED
    );
    // The first use opens the session's own `rec`; its `initialize` waits for `go`, and
    // meanwhile the session asks for `debug`.
    let meanwhile = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !dir.0.join("got-init").exists() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no own upstream opened"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let level = json!({"jsonrpc":"2.0","id":"l","method":"logging/setLevel","params":{"level":"debug"}});
        let r = gw.post(Some(&sid), &level).await;
        assert_eq!(r.json()["result"], json!({}), "{}", r.text);
        std::fs::write(dir.0.join("go"), "").unwrap();
    };
    let (seen, ()) = tokio::time::timeout(
        Duration::from_secs(30),
        futures::future::join(stats(gw, &sid), meanwhile),
    )
    .await
    .expect("the first call was answered");
    assert_eq!(
        seen["setLevel"],
        json!(["debug"]),
        "the own upstream runs at a level the session no longer has: {seen}"
    );
}

/// An `isolation: per-session` backend that answers only Modern requests has no Legacy
/// upstream to open per session (it refuses `initialize`): a Legacy session reaches it
/// through the era bridge, as it would a shared one, and Modern callers are unaffected.
/// Fails while the set opens an own upstream for it (every Legacy call is refused).
#[tokio::test]
async fn a_modern_only_per_session_backend_still_serves_legacy_sessions() {
    let mo = format!(
        "  - name: mo\n    command: {}\n    args: [fixture, --era, modern]\n    isolation: per-session\n",
        super::SB
    );
    let yaml = format!("backends:\n{}{mo}", stdio("alpha", ""));
    let served = serve("own-modern-only", &yaml, None).await;
    let gw = &served.gw;
    let modern = call_text(gw, Era::Modern, None, "mo_pid", json!({})).await;
    assert!(modern.parse::<u32>().is_ok(), "{modern}");
    let sid = session(gw).await;
    let params = json!({"name": "mo_pid", "arguments": {}});
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":params}),
        )
        .await;
    let body = r.json();
    assert!(
        body["result"].is_object(),
        "a Legacy session cannot use a Modern-only per-session backend: {body}"
    );
    assert!(tool_text(&body).parse::<u32>().is_ok(), "{body}");
}

/// A list change from a session's own process reaches that session once (on the stream of
/// the request it came during), and no other session: each listen stream's next event is a
/// shared backend's sentinel change, which every session hears.
#[tokio::test]
async fn a_list_change_of_a_sessions_own_process_reaches_only_that_session_once() {
    let served = mixed("own-list-changed").await;
    let gw = &served.gw;
    let (a, b) = (session(gw).await, session(gw).await);
    let mut streams = Vec::new();
    for sid in [&a, &b] {
        text(gw, sid, "beta_pid").await;
        streams.push(crate::common::Listener::open(gw, sid, None).await);
    }
    let trigger = |tool: &str, kind: &str| {
        let params = json!({"name": tool, "arguments": {"kind": kind}});
        json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":params})
    };
    let reply = gw
        .post(Some(&a), &trigger("beta_trigger", "tools_list_changed"))
        .await;
    let methods: Vec<Value> = reply
        .messages()
        .iter()
        .map(|m| m["method"].clone())
        .collect();
    let heard = methods
        .iter()
        .filter(|m| *m == "notifications/tools/list_changed")
        .count();
    assert_eq!(heard, 1, "{}", reply.text);
    // The sentinel: the shared backend's change, on every session's listen stream.
    let sentinel = gw
        .post(Some(&a), &trigger("alpha_trigger", "prompts_list_changed"))
        .await;
    assert_eq!(sentinel.status, StatusCode::OK, "{}", sentinel.text);
    for (n, stream) in streams.iter_mut().enumerate() {
        let event = stream.next().await;
        assert_eq!(
            event.data["method"], "notifications/prompts/list_changed",
            "session {n} heard {}",
            event.data
        );
    }
}

/// A Legacy stdio backend without the logging capability: one tool, `nolog_seen`, answering
/// the methods that reached it, in order.
const NOLOG: &str = r#"
import json, sys
seen = []
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    m, rid, p = msg["method"], msg["id"], msg.get("params") or {}
    seen.append(m)
    if m == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-11-25",
              "serverInfo": {"name": "nolog", "version": "1"}, "capabilities": {"tools": {}}}})
    elif m == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": "nolog_seen", "inputSchema": {"type": "object"}}]}})
    elif m == "tools/call":
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [
            {"type": "text", "text": json.dumps(seen)}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
"#;

/// Issue 30: `logging/setLevel` with a per-session backend that logs and a shared one that
/// does not: the level goes to the one that logs (the session's own fixture, which then
/// stops sending `info`), never to the other, and the client is answered `{}`. Fails while
/// the fan-out asks every Legacy backend (the shared one's `-32601` is the answer).
#[tokio::test]
async fn set_level_reaches_only_backends_that_log_and_succeeds() {
    let dir = super::Dir::new("own-nolog-script");
    let script = dir.write("nolog.py", NOLOG);
    let yaml = format!(
        "backends:\n  - name: quiet\n    command: python3\n    args: [{}]\n{}",
        script.display(),
        stdio("alpha", "    isolation: per-session\n")
    );
    let served = serve("own-nolog", &yaml, None).await;
    let gw = &served.gw;
    let sid = session(gw).await;
    let logging = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"test_tool_with_logging","arguments":{}}});
    let logs = |r: &crate::common::Reply| {
        r.messages()
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .count()
    };
    // Opens the session's own `alpha`, which logs at every level until told otherwise.
    let r = gw.post(Some(&sid), &logging).await;
    assert_eq!(logs(&r), 3, "{}", r.text);
    let level =
        json!({"jsonrpc":"2.0","id":"l","method":"logging/setLevel","params":{"level":"error"}});
    let r = gw.post(Some(&sid), &level).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    // The result follows the messages on the call's stream: none came before it.
    let r = gw.post(Some(&sid), &logging).await;
    assert!(
        r.messages().last().unwrap()["result"].is_object(),
        "{}",
        r.text
    );
    assert_eq!(logs(&r), 0, "{}", r.text);
    let seen = text(gw, &sid, "nolog_seen").await;
    assert!(!seen.contains("logging/setLevel"), "{seen}");
}
