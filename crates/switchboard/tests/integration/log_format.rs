//! `--log-format json`: every stderr line is one JSON object, and a line about a session names
//! it by its label, never its id (logs go to places the session's bearer must not).

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{tool_text, TestGateway};

#[tokio::test]
async fn json_logs_are_one_object_per_line_and_name_sessions_by_label() {
    let gw = TestGateway::start_env(
        &["--log-format", "json", "--isolation", "per-session"],
        &[],
        &[("SWITCHBOARD_LOG", "debug")],
    )
    .await;
    let session = gw.session().await;
    let r = gw
        .call_tool(Some(&session), json!(1), "pid", json!({}))
        .await
        .json();
    let pid = tool_text(&r).to_owned();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    // The gateway logs the session's end when it notices the process is gone: wait (bounded)
    // for that line, then read every line written so far.
    let label = format!("{}…", &session[..8]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let ended = loop {
        let logs = gw.stderr.lock().clone();
        let lines: Vec<Value> = logs
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect();
        if let Some(line) = lines.iter().find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("session ended"))
        }) {
            break (line.clone(), logs, lines);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no end line:\n{logs}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (line, logs, lines) = ended;
    assert_eq!(line["session"], json!(label), "{line}");
    assert_eq!(line["level"], json!("WARN"), "{line}");
    for l in &lines {
        assert!(l["timestamp"].is_string() && l["level"].is_string(), "{l}");
    }
    // Debug level logs the request path too: the id itself appears nowhere.
    assert!(lines.len() > 3, "{logs}");
    assert!(!logs.contains(&session), "session id in the logs:\n{logs}");
}
