//! Hot reload of `switchboard serve --config F` (issue 17): the file is watched (and SIGHUP
//! reloads it); a reload applies whole (backends added, removed, refiltered, the policy) under
//! load without disturbing the backends it keeps, tells each Legacy session once per changed
//! list, and a file with errors is refused whole while the old configuration keeps serving.
//! The gateway reports each outcome on one stdout line, which these tests wait for.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{process_running, Listener, Reply, TestGateway};
use crate::fixture_http::FixtureHttp;
use crate::vmcp::{
    call_text, list_all, modern, remote, request, serve, stdio, tool_names, Dir, Era,
};

mod guardrails;
mod load;
mod openapi;
mod policy;

use load::Load;

/// Printed once a reload is fully applied (backends up, routing switched, sessions told).
pub(crate) const RELOADED: &str = "switchboard: config reloaded";
/// Printed when a new file has errors (nothing of it applied).
pub(crate) const REFUSED: &str = "switchboard: config reload refused";
/// Generous: the poll is about once a second, and a reload starts backend processes.
pub(crate) const BOUND: Duration = Duration::from_secs(30);
/// Every fixture lists it; the first backend in configured order (`keep`) serves it.
const WATCHED: &str = "test://watched-resource";
const TOOLS_CHANGED: &str = "notifications/tools/list_changed";
/// `a`'s settings after the reload: one of its tools filtered out.
const DENY_SLOW: &str = "    tools:\n      deny: [slow]\n";

/// Replaces `config` atomically (write a sibling, rename over), as editors and deploy tools
/// do: the watcher must never see a half-written file.
pub(crate) fn rewrite(config: &std::path::Path, yaml: &str) {
    let tmp = config.with_extension("yaml.tmp");
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, config).unwrap();
}

/// The config file `serve` wrote in its directory.
pub(crate) fn config_of(dir: &Dir) -> std::path::PathBuf {
    dir.0.join("sb.yaml")
}

/// Sends SIGHUP to the gateway.
pub(crate) fn hangup(gw: &TestGateway) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &gw.pid().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// `keep` first (so it serves the watched URI), then `a` as `a_entry`, then `third`, all
/// fixtures on stdio: every name collides, so every tool is `<backend>_<name>`.
fn three(a_entry: &str, third: &str) -> String {
    format!(
        "backends:\n{}{a_entry}{}",
        stdio("keep", ""),
        stdio(third, "")
    )
}

#[tokio::test]
async fn a_reload_under_load_adds_removes_and_refilters_without_errors_on_the_others() {
    let served = serve("reload-load", &three(&stdio("a", ""), "b"), None).await;
    let gw = &served.gw;
    let (sessions, mut streams) = listening_sessions(gw, 4).await;
    let s0 = Some(sessions[0].as_str());
    let before = tool_names(gw, Era::Legacy, s0).await;
    for name in ["keep_echo", "a_slow", "b_echo"] {
        assert!(before.iter().any(|n| n == name), "{name}: {before:?}");
    }
    assert!(!before.iter().any(|n| n.starts_with("c_")), "{before:?}");
    // The sentinel works, and nothing is pending on the streams before the reload.
    sentinel(gw, &sessions[0]).await;
    for (n, stream) in streams.iter_mut().enumerate() {
        let events = until_sentinel(stream).await;
        assert!(
            events.is_empty(),
            "session {n} before the reload: {events:?}"
        );
    }
    let others_before = other_lists(gw, s0).await;

    let load_session = gw.session().await;
    let load = Load::start(gw, &load_session, 8, "keep_echo");
    load.until_calls(50).await;
    let at_write = load.calls();
    // `b` removed, `c` added, `a` refiltered, in one rewrite.
    rewrite(
        &config_of(&served._dir),
        &three(&stdio("a", DENY_SLOW), "c"),
    );
    let line = gw.wait_stdout(RELOADED, BOUND).await;
    let at_line = load.calls();
    assert!(
        at_line > at_write,
        "no call was answered while the reload was applied ({at_write} before, {at_line} at {line:?})"
    );
    for era in [Era::Legacy, Era::Modern] {
        the_new_set_serves(gw, era, (era == Era::Legacy).then_some(&sessions[0])).await;
    }
    each_heard_one_change(gw, &sessions[0], &mut streams, others_before).await;

    load.until_calls(at_line + 50).await;
    let report = load.stop().await;
    assert_eq!(
        report.errors, 0,
        "calls to keep failed: {:#?}",
        report.samples
    );
    assert!(report.calls > at_line, "{report:?}");
}

/// After the reload: `c`'s tools listed and callable, none of `b`'s (a call is a clean
/// JSON-RPC error), `a` without its denied tool, `keep` untouched.
async fn the_new_set_serves(gw: &TestGateway, era: Era, s: Option<&String>) {
    let s = s.map(String::as_str);
    let now = tool_names(gw, era, s).await;
    for name in ["keep_echo", "keep_slow", "a_echo", "c_echo", "c_slow"] {
        assert!(now.iter().any(|n| n == name), "{era:?} {name}: {now:?}");
    }
    assert!(!now.iter().any(|n| n.starts_with("b_")), "{era:?}: {now:?}");
    assert!(!now.iter().any(|n| n == "a_slow"), "{era:?}: {now:?}");
    let answer = call_text(gw, era, s, "c_echo", json!({"text": "to c"})).await;
    assert_eq!(answer, "to c", "{era:?}");
    for gone in ["b_echo", "a_slow"] {
        let args = json!({"text": "x", "ms": 1});
        clean_error(
            &call(gw, era, s, gone, args).await,
            &format!("{era:?} {gone}"),
        );
    }
}

/// A `tools/call` in `era`, the raw reply.
async fn call(gw: &TestGateway, era: Era, s: Option<&str>, name: &str, args: Value) -> Reply {
    let params = json!({"name": name, "arguments": args});
    match era {
        Era::Legacy => gw.post(s, &request(json!(9), "tools/call", params)).await,
        Era::Modern => modern(gw, json!(9), "tools/call", params, &[]).await,
    }
}

/// One JSON-RPC error answer (code and message), no result, not a server failure.
pub(crate) fn clean_error(reply: &Reply, what: &str) {
    assert!(
        !reply.status.is_server_error(),
        "{what}: {} {}",
        reply.status,
        reply.text
    );
    let answer = reply.json();
    assert!(answer.get("result").is_none(), "{what}: {answer}");
    assert!(answer["error"]["code"].is_i64(), "{what}: {answer}");
    assert!(answer["error"]["message"].is_string(), "{what}: {answer}");
}

/// `n` Legacy sessions, each subscribed to the watched URI (the sentinel) and listening.
async fn listening_sessions(gw: &TestGateway, n: usize) -> (Vec<String>, Vec<Listener>) {
    let mut sessions = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..n {
        let sid = gw.session().await;
        streams.push(Listener::open(gw, &sid, None).await);
        let params = json!({ "uri": WATCHED });
        let sub = request(json!("sub"), "resources/subscribe", params);
        let r = gw.post(Some(&sid), &sub).await;
        assert_eq!(r.json()["result"], json!({}), "{}", r.text);
        sessions.push(sid);
    }
    (sessions, streams)
}

/// `keep` announces the watched URI: every subscribed session's stream gets it after
/// whatever the gateway pushed there before (a reload's notifications, printed-before).
async fn sentinel(gw: &TestGateway, sid: &str) {
    let args = json!({"kind": "resource_updated", "uri": WATCHED});
    call_text(gw, Era::Legacy, Some(sid), "keep_trigger", args).await;
}

/// The events before the sentinel on `stream`.
async fn until_sentinel(stream: &mut Listener) -> Vec<Value> {
    let mut before = Vec::new();
    loop {
        let event = stream.next().await.data;
        if event["method"] == "notifications/resources/updated" && event["params"]["uri"] == WATCHED
        {
            return before;
        }
        before.push(event);
    }
}

/// The merged prompts and resources lists (whether a reload changed them decides whether
/// their `list_changed` is due).
async fn other_lists(gw: &TestGateway, s: Option<&str>) -> (Vec<Value>, Vec<Value>) {
    let prompts = list_all(gw, Era::Legacy, s, "prompts/list", "prompts")
        .await
        .0;
    let resources = list_all(gw, Era::Legacy, s, "resources/list", "resources")
        .await
        .0;
    (prompts, resources)
}

/// Every stream, up to the sentinel, holds exactly one payload-free tools `list_changed`;
/// one prompts/resources `list_changed` where that list changed (at most one otherwise).
async fn each_heard_one_change(
    gw: &TestGateway,
    sid: &str,
    streams: &mut [Listener],
    (prompts_before, resources_before): (Vec<Value>, Vec<Value>),
) {
    let (prompts, resources) = other_lists(gw, Some(sid)).await;
    sentinel(gw, sid).await;
    let changed = [
        (
            "notifications/prompts/list_changed",
            prompts != prompts_before,
        ),
        (
            "notifications/resources/list_changed",
            resources != resources_before,
        ),
    ];
    for (n, stream) in streams.iter_mut().enumerate() {
        let events = until_sentinel(stream).await;
        let count = |m: &str| events.iter().filter(|e| e["method"] == m).count();
        assert_eq!(count(TOOLS_CHANGED), 1, "session {n}: {events:?}");
        for (method, did) in changed {
            let (got, what) = (count(method), format!("session {n} {method}: {events:?}"));
            if did {
                assert_eq!(got, 1, "{what}");
            } else {
                assert!(got <= 1, "{what}");
            }
        }
        for e in &events {
            if e["method"]
                .as_str()
                .is_some_and(|m| m.ends_with("/list_changed"))
            {
                assert!(e.get("params").is_none() && e.get("id").is_none(), "{e}");
            }
        }
    }
}

/// `keep` and `a`, both fixtures (colliding, so prefixed); `a` with `a_settings`.
fn pair(a_settings: &str) -> String {
    format!("backends:\n{}{}", stdio("keep", ""), stdio("a", a_settings))
}

/// Whether any stdout line so far reports an applied reload.
fn printed_reloaded(gw: &TestGateway) -> bool {
    gw.stdout.lines().iter().any(|l| l.starts_with(RELOADED))
}

/// The old set still serves: the same names, and calls to both backends answer.
async fn still_serves(gw: &TestGateway, sid: &str, names: &[String], what: &str) {
    assert!(
        process_running(&gw.pid().to_string()),
        "{what}: gateway gone"
    );
    let now = tool_names(gw, Era::Legacy, Some(sid)).await;
    assert_eq!(now, names, "{what}");
    for tool in ["keep_echo", "a_echo"] {
        let answer = call_text(gw, Era::Legacy, Some(sid), tool, json!({"text": what})).await;
        assert_eq!(answer, what, "{tool}");
    }
}

#[tokio::test]
async fn an_invalid_config_is_refused_whole_and_the_old_one_keeps_serving() {
    let served = serve("reload-refused", &pair(""), None).await;
    let gw = &served.gw;
    let config = config_of(&served._dir);
    let sid = gw.session().await;
    let before = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(!before.iter().any(|n| n.starts_with("c_")), "{before:?}");
    // Each bad file also adds `c` and refilters `a`: a partial apply would show.
    let valid = format!("{}{}", pair(DENY_SLOW), stdio("c", ""));
    let bad = [
        ("an unknown key", format!("noSuchSetting: 1\n{valid}")),
        ("a duplicate name", format!("{valid}{}", stdio("a", ""))),
    ];
    for (what, yaml) in bad {
        rewrite(&config, &yaml);
        let line = gw.wait_stdout(REFUSED, BOUND).await;
        still_serves(gw, &sid, &before, &format!("after {what} ({line})")).await;
    }
    assert!(!printed_reloaded(gw), "{:?}", gw.stdout.lines());

    rewrite(&config, &valid);
    gw.wait_stdout(RELOADED, BOUND).await;
    let now = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(now.iter().any(|n| n == "c_echo"), "{now:?}");
    assert!(!now.iter().any(|n| n == "a_slow"), "{now:?}");
    let answer = call_text(gw, Era::Legacy, Some(&sid), "c_echo", json!({"text": "c"})).await;
    assert_eq!(answer, "c");
    // Both refusals and the one reload are counted.
    let metrics = gw
        .http
        .get(format!("{}/metrics", gw.base()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (outcome, n) in [("refused", 2), ("applied", 1)] {
        let line = format!("switchboard_config_reloads_total{{outcome=\"{outcome}\"}} {n}");
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
}

/// Removing the first backend moves the others up the file; a backend that did not change is
/// not changed by its new place. (A Legacy-only remote gives each session an upstream of its
/// own, so "changed" would refuse the whole reload.)
#[tokio::test]
async fn removing_the_first_backend_leaves_the_moved_ones_unchanged() {
    let rem = FixtureHttp::start(&["--era", "legacy"]).await;
    let (b, r) = (stdio("b", ""), remote("rem", &rem.url));
    let served = serve(
        "reload-first",
        &format!("backends:\n{}{b}{r}", stdio("a", "")),
        Some(rem),
    )
    .await;
    let gw = &served.gw;
    let sid = gw.session().await;
    let before = call_text(gw, Era::Legacy, Some(&sid), "rem_instance", json!({})).await;

    rewrite(&config_of(&served._dir), &format!("backends:\n{b}{r}"));
    let line = gw.wait_stdout("switchboard: config reload", BOUND).await;
    assert!(line.starts_with(RELOADED), "{line}");
    assert!(
        line.contains("added [], removed [a], restarted []"),
        "{line}"
    );
    // The session keeps its own upstream on `rem`, and `a` is gone.
    let after = call_text(gw, Era::Legacy, Some(&sid), "rem_instance", json!({})).await;
    assert_eq!(after, before);
    let now = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(!now.iter().any(|n| n.starts_with("a_")), "{now:?}");
}

/// A remote's header value rotated in the file (a revoked key replaced) restarts the remote:
/// its value is part of what the backend is (review: a header value hashed as its redacted
/// `Debug` form, `Sensitive`, so a rotation reloaded nothing and the old key stayed in use).
#[tokio::test]
async fn a_rotated_header_value_restarts_its_remote() {
    let rem = FixtureHttp::start(&[]).await;
    let entry = |key: &str| {
        let r = remote("rem", &rem.url);
        format!("{r}    headers: {{X-Api-Key: \"{key}\"}}\n")
    };
    let yaml = |key: &str| format!("backends:\n{}{}", stdio("a", ""), entry(key));
    let (first, second) = (yaml("it-rotated-key-1"), yaml("it-rotated-key-2"));
    let served = serve("reload-rotate", &first, Some(rem)).await;
    let gw = &served.gw;
    rewrite(&config_of(&served._dir), &second);
    let line = gw.wait_stdout("switchboard: config reload", BOUND).await;
    assert!(line.starts_with(RELOADED), "{line}");
    assert!(
        line.contains("added [], removed [], restarted [rem]"),
        "{line}"
    );
    assert!(!line.contains("it-rotated-key"), "{line}");
}

/// A refused file changes nothing, not even what the gateway remembers of backends that
/// never started: one the refused file dropped is still shown and still keeps `/readyz` at
/// 503 under `readyWhen: all` (review: it was forgotten before the file was refused, and the
/// gateway reported ready).
#[tokio::test]
async fn a_refused_reload_does_not_forget_a_backend_that_never_started() {
    let broken = "  - name: broken\n    command: /nonexistent/sb-it-broken\n";
    let head = "health: {readyWhen: all}\nbackends:\n";
    let first = format!("{head}{}{broken}{}", stdio("a", ""), stdio("b", ""));
    let served = serve("reload-refused-missing", &first, None).await;
    let gw = &served.gw;
    let ready = |gw: &TestGateway| {
        let url = format!("{}/readyz", gw.base());
        let http = gw.http.clone();
        async move { http.get(url).send().await.unwrap().status().as_u16() }
    };
    let shown = |gw: &TestGateway| {
        let url = format!("{}/status", gw.base());
        let http = gw.http.clone();
        async move {
            let status: Value = http.get(url).send().await.unwrap().json().await.unwrap();
            let names = status["backends"].as_array().unwrap().iter();
            names
                .filter_map(|b| b["name"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(ready(gw).await, 503);
    assert!(shown(gw).await.contains(&"broken".to_owned()));
    // `broken` dropped, and `b` changed to a command that cannot start: refused whole.
    let b_broken = "  - name: b\n    command: /nonexistent/sb-it-b\n";
    rewrite(
        &config_of(&served._dir),
        &format!("{head}{}{b_broken}", stdio("a", "")),
    );
    let line = gw.wait_stdout("switchboard: config reload", BOUND).await;
    assert!(line.starts_with(REFUSED), "{line}");
    assert_eq!(ready(gw).await, 503, "still waiting for broken");
    assert!(shown(gw).await.contains(&"broken".to_owned()));
}

#[tokio::test]
async fn sighup_reloads() {
    let served = serve("reload-sighup", &pair(""), None).await;
    let gw = &served.gw;
    let config = config_of(&served._dir);
    let sid = gw.session().await;
    let before = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(before.iter().any(|n| n == "a_slow"), "{before:?}");

    // Unchanged file: SIGHUP neither kills the gateway nor reports a reload. The refusal of
    // the bad file written next is the ordering sentinel: reloads run one at a time, so a
    // report for the SIGHUP would be printed before it (if the SIGHUP is only handled
    // after the rewrite, it sees the bad file and is that refusal).
    hangup(gw);
    still_serves(gw, &sid, &before, "after an idle SIGHUP").await;
    rewrite(&config, &format!("noSuchSetting: 1\n{}", pair("")));
    gw.wait_stdout(REFUSED, BOUND).await;
    assert!(!printed_reloaded(gw), "{:?}", gw.stdout.lines());
    still_serves(gw, &sid, &before, "after a refusal").await;

    // A change, and SIGHUP at once (the poll may see it first: either reports the reload).
    rewrite(&config, &pair(DENY_SLOW));
    hangup(gw);
    gw.wait_stdout(RELOADED, BOUND).await;
    assert!(process_running(&gw.pid().to_string()));
    let now = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(!now.iter().any(|n| n == "a_slow"), "{now:?}");
    let answer = call_text(gw, Era::Legacy, Some(&sid), "a_echo", json!({"text": "a"})).await;
    assert_eq!(answer, "a");
}

/// Calls in flight to backend `name`, from `/status`.
async fn in_flight(gw: &TestGateway, name: &str) -> u64 {
    let status: Value = gw
        .http
        .get(format!("{}/status", gw.base()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    status["backends"]
        .as_array()
        .and_then(|all| all.iter().find(|b| b["name"] == name))
        .map_or(0, |b| b["inFlight"].as_u64().unwrap_or(0))
}

#[tokio::test]
async fn a_call_in_flight_to_a_removed_backend_still_gets_its_answer() {
    let served = serve("reload-drain", &three(&stdio("a", ""), "b"), None).await;
    let gw = &served.gw;
    let sid = gw.session().await;
    let body = request(
        json!(7),
        "tools/call",
        json!({"name": "b_slow", "arguments": {"ms": 1500}}),
    );
    let reload = async {
        // The call has reached `b` before the file changes (state, not time).
        let deadline = tokio::time::Instant::now() + BOUND;
        while in_flight(gw, "b").await == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the call never reached b"
            );
            tokio::task::yield_now().await;
        }
        rewrite(&config_of(&served._dir), &three(&stdio("a", ""), "c"));
        gw.wait_stdout(RELOADED, BOUND).await
    };
    let (reply, line) = tokio::join!(gw.post(Some(&sid), &body), reload);
    assert!(line.contains("removed [b]"), "{line}");
    let names = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(!names.iter().any(|n| n.starts_with("b_")), "{names:?}");
    let answer = reply.json();
    assert_eq!(answer["id"], json!(7), "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"],
        json!("slept 1500"),
        "the drained backend answered its call: {answer}"
    );
}

/// Under `conflictResolution: manual`, `keep` shows only `echo` and `a` only `slow`.
fn manual(extra: &str) -> String {
    let only = |tool: &str| {
        format!("    tools:\n      allow: [{tool}]\n    prompts:\n      defaultVisibility: deny\n")
    };
    format!(
        "aggregation:\n  conflictResolution: manual\nbackends:\n{}{}{extra}",
        stdio("keep", &only("echo")),
        stdio("a", &only("slow"))
    )
}

#[tokio::test]
async fn a_reload_whose_lists_no_longer_merge_is_rolled_back() {
    let served = serve("reload-manual", &manual(""), None).await;
    let gw = &served.gw;
    let sid = gw.session().await;
    let before = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert_eq!(before, ["echo", "slow"], "{before:?}");
    // `c` lists `echo` too: under `manual` the tools list no longer merges. No config check
    // can see that before `c` runs; the reload is refused and the old set is put back.
    rewrite(&config_of(&served._dir), &manual(&stdio("c", "")));
    let line = gw.wait_stdout(REFUSED, BOUND).await;
    assert!(line.contains("collision"), "{line}");
    let now = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert_eq!(now, before, "the old lists still serve");
    let answer = call_text(gw, Era::Legacy, Some(&sid), "echo", json!({"text": "k"})).await;
    assert_eq!(answer, "k");
    assert!(!printed_reloaded(gw), "{:?}", gw.stdout.lines());
}

/// An edit made while the gateway starts (after it read the file, before the reload worker
/// first looked at it) is reloaded: the worker took that first look as what was running, and
/// the edit was never applied (a CI run saw `a_rotated_header_value_restarts_its_remote`
/// miss its reload so). Backend `late` marks when its process starts (the file has been
/// read) and starts a second later; the reload worker starts after every backend.
#[tokio::test]
async fn an_edit_made_while_the_gateway_starts_is_reloaded() {
    let dir = Dir::new("reload-early-edit");
    let marker = dir.0.join("late-started");
    let late = format!(
        "  - name: late\n    command: sh\n    args: [-c, \"touch '{}'; sleep 1; exec '{}' fixture\"]\n",
        marker.display(),
        crate::vmcp::SB
    );
    let first = format!("backends:\n{}{late}", stdio("a", ""));
    let second = format!("backends:\n{}{late}", stdio("a", DENY_SLOW));
    let config = dir.write("sb.yaml", &first);
    let edit = {
        let config = config.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + BOUND;
            while !marker.exists() {
                assert!(tokio::time::Instant::now() < deadline, "late never started");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            rewrite(&config, &second);
        })
    };
    let mut cmd = tokio::process::Command::new(crate::vmcp::SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    edit.await.unwrap();
    let line = gw.wait_stdout("switchboard: config reload", BOUND).await;
    assert!(line.starts_with(RELOADED), "{line}");
}
