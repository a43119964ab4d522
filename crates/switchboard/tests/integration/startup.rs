//! Backends that are slow or odd at startup: a 2026-07-28-only server that takes longer to
//! start than the era probe waits is still recognised as Modern, not failed.

use serde_json::json;

use crate::common::{tool_text, TestGateway};

/// Seen for real (nine servers starting at once on two cores): the Modern probe gives up
/// after 5 s, and the `initialize` that follows is refused by a server that only speaks
/// 2026-07-28. The refusal names that version: the gateway asks `server/discover` again.
#[tokio::test]
async fn a_slow_starting_modern_only_backend_is_served() {
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let backend = format!("sleep 6; exec {sb} fixture --era modern");
    let gw = TestGateway::start_with(&["--startup-timeout", "20"], &["sh", "-c", &backend]).await;
    let params = json!({"name": "echo", "arguments": {"text": "modern"}});
    let r = crate::vmcp::modern(&gw, json!(1), "tools/call", params, &[]).await;
    assert_eq!(tool_text(&r.json()), "modern", "{}", r.text);
    // A Legacy client reaches it through the gateway's envelope.
    let sid = gw.session().await;
    let r = gw
        .call_tool(Some(&sid), json!(2), "echo", json!({"text": "legacy"}))
        .await;
    assert_eq!(tool_text(&r.json()), "legacy", "{}", r.text);
}

/// A backend whose own process dies leaves nothing behind: what it started (here a `sleep`
/// holding its stdout, as `npm exec` leaves its `sh` and `node`) is stopped with it when the
/// gateway restarts the backend, instead of living on under PID 1 with the old pipe open.
#[tokio::test]
async fn a_dead_backend_takes_what_it_started_with_it() {
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let dir = crate::vmcp::Dir::new("process-group");
    let pidfile = dir.0.join("child.pid");
    let backend = format!(
        "sleep 300 & echo $! > {}; exec {sb} fixture",
        pidfile.display()
    );
    let gw = TestGateway::start_with(&[], &["sh", "-c", &backend]).await;
    let sid = gw.session().await;
    let leader = tool_text(
        &gw.call_tool(Some(&sid), json!(1), "pid", json!({}))
            .await
            .json(),
    )
    .to_owned();
    let child = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    assert!(crate::common::process_running(&child), "the child runs");
    let killed = std::process::Command::new("kill")
        .args(["-9", &leader])
        .status()
        .unwrap();
    assert!(killed.success());
    // Bounded: the restart takes ~0.1 s; the child goes with its leader, at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while crate::common::process_running(&child) {
        assert!(
            std::time::Instant::now() < deadline,
            "{child} outlived its backend"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
