//! The gateway's log says what happened and no more: a common Legacy server's reply to the
//! era probe does not flood it, a stop the gateway asked for (or that came with the
//! gateway's own) is not reported as a crash, and `logging` is offered only where a log
//! message can reach the session.

use std::time::Duration;

use serde_json::json;

use crate::common::TestGateway;
use crate::config_file::{Dir, SWITCHBOARD};
use crate::legacy_sse::sdk_python;

/// Waits for the gateway's stderr to end (it exited) and returns it.
async fn final_stderr(gw: &mut TestGateway) -> String {
    let mut done = gw.stderr_done.clone();
    tokio::time::timeout(Duration::from_secs(20), done.wait_for(|d| *d))
        .await
        .expect("stderr did not end")
        .unwrap();
    gw.stderr.lock().clone()
}

/// Three stdio servers on the Python SDK 1.x (each writes ~94 lines of a validation report
/// to stderr in reply to the era probe's `server/discover`): the gateway's whole log, from
/// start to stop, stays under 10 lines per server.
#[tokio::test]
async fn three_python_sdk_servers_do_not_flood_the_log() {
    let python = sdk_python("sse").await;
    let server = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/clients/py_stdio_server.py"
    );
    let dir = Dir::new("quiet-py");
    let mut yaml = String::from("backends:\n");
    for name in ["pyA", "pyB", "pyC"] {
        yaml += &format!("  - name: {name}\n    command: {python}\n    args: [\"{server}\"]\n");
    }
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"]);
    let mut gw = TestGateway::start_command(cmd).await;
    // Served: each server answered its handshake and its tools are listed.
    let sid = gw.session().await;
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    let tools = r.json()["result"]["tools"].to_string();
    for name in ["pyA_echo", "pyB_echo", "pyC_echo"] {
        assert!(tools.contains(name), "{name} not in {tools}");
    }
    assert!(gw.terminate_within(Duration::from_secs(20)).await);
    let log = final_stderr(&mut gw).await;
    let lines = log.lines().count();
    assert!(lines < 30, "{lines} log lines for three servers:\n{log}");
    let reports = log.matches("Failed to validate request").count();
    assert!(reports <= 3, "{reports} validation reports relayed:\n{log}");
    assert!(
        log.contains("more line(s) of stderr within 1 s not logged"),
        "{log}"
    );
}

/// The process ids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    out
}

/// Sends `signal` to `pid`.
fn kill(signal: &str, pid: u32) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// A service manager stops a service by signalling all its processes (systemd's control
/// group), in no set order: the backend's SIGTERM is part of the stop, not a crash to
/// restart. Here the backend is signalled first and the gateway as soon as its log shows
/// the backend ended. A plain stop says the gateway stopped the backend.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_stop_is_logged_as_a_stop_not_a_crash() {
    let dir = Dir::new("quiet-stop");
    let config = dir.write(
        "sb.yaml",
        &format!("backends:\n  - name: fx\n    command: {SWITCHBOARD}\n    args: [fixture]\n"),
    );
    let start = || {
        let mut cmd = tokio::process::Command::new(SWITCHBOARD);
        cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"]);
        TestGateway::start_command(cmd)
    };
    // Once it serves (its signal handler is set).
    let mut gw = start().await;
    gw.session().await;
    let backends = children(gw.pid());
    assert_eq!(backends.len(), 1, "{backends:?}");
    kill("-TERM", backends[0]);
    let ended = "backend killed by signal 15 (SIGTERM) program=";
    tokio::time::timeout(Duration::from_secs(10), async {
        while !gw.stderr.lock().contains(ended) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the backend's end was not logged");
    kill("-TERM", gw.pid());
    let log = final_stderr(&mut gw).await;
    assert!(
        !log.contains("restarting") && !log.contains("WARN"),
        "{log}"
    );
    assert!(
        log.contains(
            "backend killed by signal 15 (SIGTERM) while the gateway stops; not restarted"
        ),
        "{log}"
    );
    // The gateway alone signalled: it stops the backend itself, and says so.
    let mut gw = start().await;
    gw.session().await;
    assert!(gw.terminate_within(Duration::from_secs(20)).await);
    let log = final_stderr(&mut gw).await;
    assert!(
        !log.contains("restarting") && !log.contains("WARN"),
        "{log}"
    );
    assert!(
        log.contains("backend stopped as the gateway asked: exited with status 0"),
        "{log}"
    );
}

/// A shared backend's log messages name no session, so they are never delivered: the
/// gateway's `initialize` does not offer `logging` there. A session with a backend of its
/// own gets them, and is offered `logging`.
#[tokio::test]
async fn logging_is_offered_only_where_it_can_be_delivered() {
    let shared = TestGateway::start(&[]).await;
    let (_, init) = shared.session_with_version("2025-11-25").await;
    let caps = &init["result"]["capabilities"];
    assert!(caps.get("tools").is_some(), "{caps}");
    assert!(
        caps.get("logging").is_none(),
        "shared mode offers logging: {caps}"
    );

    let own = TestGateway::start(&["--isolation", "per-session"]).await;
    let (_, init) = own.session_with_version("2025-11-25").await;
    let caps = &init["result"]["capabilities"];
    assert!(caps.get("logging").is_some(), "per-session: {caps}");

    // A set where the logging backend is per-session: the gateway answers `initialize` and
    // offers it.
    let dir = Dir::new("quiet-logging");
    let config = dir.write(
        "sb.yaml",
        &format!("backends:\n  - name: own\n    command: {SWITCHBOARD}\n    args: [fixture]\n    isolation: per-session\n  - name: shared\n    command: {SWITCHBOARD}\n    args: [fixture]\n"),
    );
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"]);
    let set = TestGateway::start_command(cmd).await;
    let (_, init) = set.session_with_version("2025-11-25").await;
    let caps = &init["result"]["capabilities"];
    assert!(
        caps.get("logging").is_some(),
        "set with a per-session backend: {caps}"
    );
}
