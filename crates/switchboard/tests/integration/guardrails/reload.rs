//! Guardrails are part of what `serve` reloads: a file that adds a rule has it check what
//! flows from then on: answers, and a backend's messages on their way to a client.

use serde_json::Value;

use super::{call, Dir, AWS, REDACTING};
use crate::common::TestGateway;
use crate::reload::{rewrite, BOUND, RELOADED};

/// The first progress note's `message.note` of a `noisy` call (with a progress token) in
/// session `s`; asserts the call's answer came.
async fn progress_note(gw: &TestGateway, s: &str) -> Value {
    let (reply, m) = call(gw, Some(s), "noisy", r#"{"ask":false}"#, true).await;
    let done = m.iter().find(|v| v["id"] == 7);
    assert!(done.is_some(), "the answer: {}", reply.text);
    let progress = m.iter().find(|v| v["method"] == "notifications/progress");
    progress.unwrap_or_else(|| panic!("{}", reply.text))["params"]["message"]["note"].clone()
}

#[tokio::test]
async fn a_reload_that_adds_a_guardrail_checks_notifications_from_then_on() {
    let dir = Dir::new("reload-notes");
    let leaky = format!(
        "{}/tests/integration/backends/leaky.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let backends =
        format!("backends:\n  - name: leaky\n    command: python3\n    args: [{leaky}]\n");
    let config = dir.write("sb.yaml", &backends);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    cmd.args(["serve", "--config", &config, "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    let s = gw.session().await;
    assert_eq!(
        progress_note(&gw, &s).await,
        format!("key {AWS}"),
        "no rule yet"
    );

    rewrite(
        std::path::Path::new(&config),
        &format!("{REDACTING}{backends}"),
    );
    gw.wait_stdout(RELOADED, BOUND).await;
    let note = progress_note(&gw, &s).await;
    assert_eq!(note, "key [REDACTED:aws_access_key]");
    // And answers: `leaky`'s result carries the key escaped and split.
    let (reply, _) = call(&gw, Some(&s), "leaky", "{}", false).await;
    assert!(
        reply.text.contains("[REDACTED:aws_access_key]"),
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("KIAIOSF"), "{}", reply.text);
}
