//! What a user sees: progress keeps a long call alive, errors say what happened, the CLI's
//! additions (`--env`, `--cwd`, `--max-request-time`), `GET /`, and a busy port.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, Reply, TestGateway};

const SWITCHBOARD: &str = env!("CARGO_BIN_EXE_switchboard");

/// A `progress` call of ~3 s reporting every 300 ms; `token` asks for progress.
fn progress_call(id: &str, token: bool) -> Value {
    let mut params = json!({"name": "progress", "arguments": {"steps": 10, "intervalMs": 300}});
    if token {
        params["_meta"] = json!({"progressToken": format!("p-{id}")});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// The answer: the last message of the body (progress notes come first on a stream).
fn answer(r: &Reply) -> Value {
    r.messages()
        .pop()
        .unwrap_or_else(|| panic!("no answer in {}", r.text))
}

/// Progress restarts the idle deadline: a call three times longer than `--request-timeout`
/// succeeds when it reports progress (a request with a progress token is answered on a
/// stream, so the notes reach the client too). The same call without a progress token is cut
/// off at the deadline.
#[tokio::test]
async fn progress_keeps_a_long_call_alive() {
    let gw = TestGateway::start(&["--request-timeout", "1"]).await;
    let sid = gw.session().await;

    let (alive_call, silent_call) = (progress_call("alive", true), progress_call("silent", false));
    let (alive, silent) = tokio::join!(
        gw.post(Some(&sid), &alive_call),
        gw.post(Some(&sid), &silent_call),
    );

    assert_eq!(alive.status, StatusCode::OK, "{}", alive.text);
    let msgs = alive.messages();
    let notes = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(notes, 10, "{msgs:?}");
    assert_eq!(answer(&alive)["id"], "alive");
    assert_eq!(tool_text(&answer(&alive)), "done");

    assert_eq!(
        silent.status,
        StatusCode::GATEWAY_TIMEOUT,
        "{}",
        silent.text
    );
    assert_eq!(silent.json()["id"], "silent");
    assert_eq!(silent.error_code(), -32000);
}

/// `--max-request-time` bounds a call however much progress it reports.
#[tokio::test]
async fn max_request_time_cuts_off_a_call_that_keeps_reporting_progress() {
    let args = ["--request-timeout", "1", "--max-request-time", "2"];
    let gw = TestGateway::start(&args).await;
    let sid = gw.session().await;
    let r = gw.post(Some(&sid), &progress_call("capped", true)).await;
    // Streamed (it carries a progress token): the deadline is the stream's last event.
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = answer(&r);
    assert_eq!(v["id"], "capped");
    assert_eq!(v["error"]["code"], -32000);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("2s"),
        "{v}"
    );
}

/// Per-session backends get the same deadline reset (their requests take the same path).
#[tokio::test]
async fn progress_keeps_a_per_session_call_alive() {
    let args = ["--request-timeout", "1", "--isolation", "per-session"];
    let gw = TestGateway::start(&args).await;
    let sid = gw.session().await;
    let r = gw.post(Some(&sid), &progress_call("own", true)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&answer(&r)), "done");
}

/// A session's backend that exits mid-call answers that call with why (-32603 with the exit
/// status, as the stream's last event: per-session answers are streamed), not as a
/// cancellation; the log names the session by its label, never its id.
#[tokio::test]
async fn a_per_session_backend_crashing_mid_call_says_how_it_exited() {
    let gw = TestGateway::start(&["--isolation", "per-session"]).await;
    let sid = gw.session().await;
    let r = gw
        .call_tool(Some(&sid), json!("x"), "exit", json!({"code": 3}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["id"], "x");
    assert_eq!(v["error"]["code"], -32603);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("backend exited with status 3"), "{v}");

    // The session is gone (a sentinel request that must see it so); by then it was logged.
    let after = gw
        .call_tool(Some(&sid), json!("y"), "echo", json!({"text": "t"}))
        .await;
    assert_eq!(after.status, StatusCode::NOT_FOUND, "{}", after.text);
    let logs = wait_for_log(&gw, "session ended").await;
    let line = logs.lines().find(|l| l.contains("session ended")).unwrap();
    assert!(line.contains("exited with status 3"), "{line}");
    assert!(line.contains(&format!("{}…", &sid[..8])), "{line}");
    assert!(!logs.contains(&sid), "the session id is never logged");
}

/// The shared backend's crash reads as words: the status it exited with, or the signal that
/// killed it, in the answers and in the supervisor's log.
#[tokio::test]
async fn shared_backend_crashes_name_the_status_or_signal() {
    let gw = TestGateway::start(&[]).await;
    let r = gw
        .call_tool(None, json!(1), "exit", json!({"code": 3}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text);
    assert!(
        r.text.contains("backend exited with status 3"),
        "{}",
        r.text
    );
    wait_for_log(&gw, "backend exited with status 3; restarting").await;

    let pid = loop {
        let r = gw.call_tool(None, json!("pid"), "pid", json!({})).await;
        if r.status == StatusCode::OK {
            break tool_text(&r.json()).to_owned();
        }
        assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let slow = gw.call_tool(None, json!(2), "slow", json!({"ms": 30_000}));
    tokio::pin!(slow);
    // The marker answered after the slow call was written, so the slow call is pending.
    let marker = tokio::select! {
        m = gw.call_tool(None, json!("m"), "echo", json!({"text": "m"})) => m,
        _ = &mut slow => panic!("the slow call finished early"),
    };
    assert_eq!(tool_text(&marker.json()), "m");
    let status = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let r = slow.await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text);
    assert!(
        r.text.contains("backend killed by signal 9 (SIGKILL)"),
        "{}",
        r.text
    );
    let logs = wait_for_log(&gw, "killed by signal 9 (SIGKILL); restarting").await;
    assert!(!logs.contains("unix_wait_status"), "{logs}");
}

/// A shared backend that never answers `initialize` fails startup saying so.
#[tokio::test]
async fn a_silent_backend_at_startup_is_named_as_such() {
    let out = tokio::process::Command::new(SWITCHBOARD)
        .args([
            "run",
            "--port",
            "0",
            "--startup-timeout",
            "1",
            "--",
            "sleep",
            "30",
        ])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("backend did not answer initialize within 1 s"),
        "{stderr}"
    );
}

/// A session's backend that never answers the client's `initialize` fails it within the
/// handshake timeout (not the request deadline), as a backend failure that says what happened.
#[tokio::test]
async fn a_silent_per_session_backend_is_named_as_such() {
    let dir = temp_dir("silent-init");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/slow_init.py"
    );
    let backend = ["python3", script, dir.to_str().unwrap()];
    let args = [
        "--isolation",
        "per-session",
        "--startup-timeout",
        "1",
        "--request-timeout",
        "30",
    ];
    let gw = TestGateway::start_with(&args, &backend).await;
    let init = json!({"jsonrpc":"2.0","id":"i","method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"0"}}});
    let r = gw.post(None, &init).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text);
    let v = r.json();
    assert_eq!(v["id"], "i");
    assert_eq!(v["error"]["code"], -32603);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("backend did not answer initialize within 1 s"),
        "{v}"
    );
}

/// A busy port is reported with its address before any backend starts: the backend here
/// would leave a marker file the moment it ran.
#[tokio::test]
async fn a_busy_port_fails_before_the_backend_starts() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let dir = temp_dir("busy-port");
    let marker = dir.join("started");
    let _ = std::fs::remove_file(&marker);
    let out = tokio::process::Command::new(SWITCHBOARD)
        .args([
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--",
            "sh",
            "-c",
        ])
        .arg("touch \"$0\"; exec \"$1\" fixture")
        .arg(&marker)
        .arg(SWITCHBOARD)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(!marker.exists(), "a backend was started: {stderr}");
    drop(taken);
}

/// `GET /` tells a person where the endpoints are, without credentials.
#[tokio::test]
async fn the_root_names_the_endpoints() {
    let dir = temp_dir("root");
    let keys = dir.join("keys");
    std::fs::write(
        &keys,
        "alice:a-long-enough-secret-for-the-test-0123456789\n",
    )
    .unwrap();
    let gw = TestGateway::start(&["--api-keys-file", keys.to_str().unwrap()]).await;
    // The MCP endpoint wants a credential; the root does not.
    let mcp = gw.http.get(&gw.url).send().await.unwrap();
    assert_eq!(mcp.status(), StatusCode::UNAUTHORIZED);
    let r = gw.http.get(format!("{}/", gw.base())).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("text/plain"), "{ct}");
    let text = r.text().await.unwrap();
    for endpoint in ["/mcp", "/sse", "/messages", "/healthz"] {
        assert!(text.contains(endpoint), "{endpoint} missing from {text}");
    }
}

/// `--env` and `--cwd` reach the backend process, shared and per-session alike.
#[tokio::test]
async fn env_and_cwd_reach_shared_and_per_session_backends() {
    let dir = temp_dir("cwd").canonicalize().unwrap();
    let args = [
        "--isolation",
        "per-session",
        "--env",
        "SB_UX_VAR=a=b c",
        "--env",
        "SB_UX_OTHER=2",
        "--cwd",
        dir.to_str().unwrap(),
    ];
    let gw = TestGateway::start(&args).await;
    let sid = gw.session().await;
    // Sessionless requests use the shared process; the session has its own.
    for session in [None, Some(sid.as_str())] {
        let env = gw
            .call_tool(session, json!(1), "env", json!({"name": "SB_UX_VAR"}))
            .await;
        assert_eq!(tool_text(&env.json()), "a=b c", "{session:?}");
        let other = gw
            .call_tool(session, json!(2), "env", json!({"name": "SB_UX_OTHER"}))
            .await;
        assert_eq!(tool_text(&other.json()), "2", "{session:?}");
        let cwd = gw.call_tool(session, json!(3), "cwd", json!({})).await;
        assert_eq!(tool_text(&cwd.json()), dir.to_str().unwrap(), "{session:?}");
    }
}

/// `--env` without `=` is a command-line error that says what is expected; `run --help`
/// shows examples.
#[tokio::test]
async fn cli_env_is_checked_and_help_has_examples() {
    let out = tokio::process::Command::new(SWITCHBOARD)
        .args(["run", "--port", "0", "--env", "NOVALUE"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("KEY=VALUE") && stderr.contains("NOVALUE"),
        "{stderr}"
    );

    let out = tokio::process::Command::new(SWITCHBOARD)
        .args(["run", "--help"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for shown in [
        "Examples:",
        "/sse",
        "/healthz",
        "--isolation per-session",
        "--env",
    ] {
        assert!(help.contains(shown), "{shown} missing from {help}");
    }
    for flag in ["--max-request-time", "--cwd"] {
        assert!(help.contains(flag), "{flag} missing from {help}");
    }
}

/// The gateway's log, once it contains `needle` (bounded wait: logs are written by another
/// process).
async fn wait_for_log(gw: &TestGateway, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let logs = gw.stderr.lock().clone();
        if logs.contains(needle) {
            return logs;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {needle:?} in the log: {logs}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sb-ux-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
